#include "tasks/task_record.h"

#include <nlohmann/json.hpp>

namespace flashroll {

TaskRecord ToTaskRecord(const Task& task) {
  nlohmann::json files = nlohmann::json::array();
  for (const TaskFile& f : task.files) files.push_back({{"path", f.path}, {"contents", f.contents}});
  const nlohmann::json problem = {{"prompt", task.prompt},
                                  {"files", files},
                                  {"answer_file", task.answer_file},
                                  {"difficulty", task.difficulty}};
  const nlohmann::json verifier = {{"kind", "exact"}, {"answer", task.answer}};
  return {problem.dump(), verifier.dump()};
}

Result<Task> FromTaskRecord(const std::string& family, const std::string& id, const TaskRecord& record) {
  const std::string what = "task " + id;
  const nlohmann::json problem = nlohmann::json::parse(record.problem_json, nullptr, false);
  const nlohmann::json verifier = nlohmann::json::parse(record.verifier_json, nullptr, false);
  const auto string_field = [&](const nlohmann::json& doc, const char* doc_name, const char* key,
                                std::string* out) -> Status {
    if (!doc.is_object() || !doc.contains(key) || !doc[key].is_string()) {
      return Status::Corruption(what + ": " + doc_name + "." + key + " is missing or not a string");
    }
    *out = doc[key].get<std::string>();
    return Status::Ok();
  };
  Task task;
  task.family = family;
  task.id = id;
  FR_RETURN_IF_ERROR(string_field(problem, "problem", "prompt", &task.prompt));
  FR_RETURN_IF_ERROR(string_field(problem, "problem", "answer_file", &task.answer_file));
  FR_RETURN_IF_ERROR(string_field(verifier, "verifier", "answer", &task.answer));
  if (!problem.contains("difficulty") || !problem["difficulty"].is_number_integer()) {
    return Status::Corruption(what + ": problem.difficulty is missing or not an integer");
  }
  task.difficulty = problem["difficulty"].get<int>();
  if (!problem.contains("files") || !problem["files"].is_array()) {
    return Status::Corruption(what + ": problem.files is missing or not a list");
  }
  for (const nlohmann::json& f : problem["files"]) {
    TaskFile file;
    FR_RETURN_IF_ERROR(string_field(f, "problem.files[]", "path", &file.path));
    FR_RETURN_IF_ERROR(string_field(f, "problem.files[]", "contents", &file.contents));
    task.files.push_back(std::move(file));
  }
  return task;
}

}  // namespace flashroll
