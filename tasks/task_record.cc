#include "tasks/task_record.h"

#include <nlohmann/json.hpp>

namespace flashroll {

TaskRecord ToTaskRecord(const Task& task) {
  nlohmann::json files = nlohmann::json::array();
  for (const TaskFile& f : task.files) files.push_back({{"path", f.path}, {"contents", f.contents}});
  nlohmann::json problem = {{"prompt", task.prompt},
                            {"files", files},
                            {"answer_file", task.answer_file},
                            {"difficulty", task.difficulty}};
  if (!task.setup.empty()) problem["setup"] = task.setup;
  const TaskEnvironment& env = task.environment;
  nlohmann::json environment = nlohmann::json::object();
  if (!env.image.empty()) environment["image"] = env.image;
  if (env.memory_bytes) environment["memory_bytes"] = *env.memory_bytes;
  if (env.disk_bytes) environment["disk_bytes"] = *env.disk_bytes;
  if (env.pids) environment["pids"] = *env.pids;
  if (env.cpus) environment["cpus"] = *env.cpus;
  if (!env.net.empty()) environment["net"] = env.net;
  if (!env.allow.empty()) environment["allow"] = env.allow;
  if (!env.user.empty()) environment["user"] = env.user;
  if (!env.group.empty()) environment["group"] = env.group;
  if (!environment.empty()) problem["environment"] = environment;
  const TaskCheck& c = task.check;
  nlohmann::json verifier = {{"kind", c.kind}, {"answer", task.answer}};
  if (c.tolerance) verifier["tolerance"] = *c.tolerance;
  if (!c.pattern.empty()) verifier["pattern"] = c.pattern;
  if (!c.script.empty()) verifier["script"] = c.script;
  if (!c.test_command.empty()) verifier["test_command"] = c.test_command;
  if (!c.fail_to_pass.empty()) verifier["fail_to_pass"] = c.fail_to_pass;
  if (!c.pass_to_pass.empty()) verifier["pass_to_pass"] = c.pass_to_pass;
  if (!c.files.empty()) {
    nlohmann::json check_files = nlohmann::json::array();
    for (const TaskFile& f : c.files) check_files.push_back({{"path", f.path}, {"contents", f.contents}});
    verifier["files"] = check_files;
  }
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
  FR_RETURN_IF_ERROR(string_field(verifier, "verifier", "kind", &task.check.kind));
  if (!IsCheckKind(task.check.kind)) return Status::Corruption(what + ": verifier.kind '" + task.check.kind + "' is unknown");
  const auto optional_string = [&](const nlohmann::json& doc, const char* doc_name, const char* key,
                                   std::string* out) -> Status {
    return doc.contains(key) ? string_field(doc, doc_name, key, out) : Status::Ok();
  };
  const auto string_list = [&](const nlohmann::json& doc, const char* doc_name, const char* key,
                               std::vector<std::string>* out) -> Status {
    if (!doc.contains(key)) return Status::Ok();
    if (!doc[key].is_array()) return Status::Corruption(what + ": " + doc_name + "." + key + " is not a list");
    for (const nlohmann::json& item : doc[key]) {
      if (!item.is_string()) return Status::Corruption(what + ": " + doc_name + "." + key + " holds a non-string");
      out->push_back(item.get<std::string>());
    }
    return Status::Ok();
  };
  if (verifier.contains("tolerance")) {
    if (!verifier["tolerance"].is_number()) return Status::Corruption(what + ": verifier.tolerance is not a number");
    task.check.tolerance = verifier["tolerance"].get<double>();
  }
  FR_RETURN_IF_ERROR(optional_string(verifier, "verifier", "pattern", &task.check.pattern));
  FR_RETURN_IF_ERROR(optional_string(verifier, "verifier", "script", &task.check.script));
  FR_RETURN_IF_ERROR(optional_string(verifier, "verifier", "test_command", &task.check.test_command));
  FR_RETURN_IF_ERROR(string_list(verifier, "verifier", "fail_to_pass", &task.check.fail_to_pass));
  FR_RETURN_IF_ERROR(string_list(verifier, "verifier", "pass_to_pass", &task.check.pass_to_pass));
  FR_RETURN_IF_ERROR(string_list(problem, "problem", "setup", &task.setup));
  if (verifier.contains("files")) {
    if (!verifier["files"].is_array()) return Status::Corruption(what + ": verifier.files is not a list");
    for (const nlohmann::json& f : verifier["files"]) {
      TaskFile file;
      FR_RETURN_IF_ERROR(string_field(f, "verifier.files[]", "path", &file.path));
      FR_RETURN_IF_ERROR(string_field(f, "verifier.files[]", "contents", &file.contents));
      task.check.files.push_back(std::move(file));
    }
  }
  if (problem.contains("environment")) {
    const nlohmann::json& e = problem["environment"];
    if (!e.is_object()) return Status::Corruption(what + ": problem.environment is not an object");
    TaskEnvironment& env = task.environment;
    FR_RETURN_IF_ERROR(optional_string(e, "problem.environment", "image", &env.image));
    FR_RETURN_IF_ERROR(optional_string(e, "problem.environment", "net", &env.net));
    FR_RETURN_IF_ERROR(string_list(e, "problem.environment", "allow", &env.allow));
    FR_RETURN_IF_ERROR(optional_string(e, "problem.environment", "user", &env.user));
    FR_RETURN_IF_ERROR(optional_string(e, "problem.environment", "group", &env.group));
    if (e.contains("memory_bytes")) {
      if (!e["memory_bytes"].is_number_unsigned()) return Status::Corruption(what + ": problem.environment.memory_bytes is not a byte count");
      env.memory_bytes = e["memory_bytes"].get<uint64_t>();
    }
    if (e.contains("disk_bytes")) {
      if (!e["disk_bytes"].is_number_unsigned()) return Status::Corruption(what + ": problem.environment.disk_bytes is not a byte count");
      env.disk_bytes = e["disk_bytes"].get<uint64_t>();
    }
    if (e.contains("pids")) {
      if (!e["pids"].is_number_integer()) return Status::Corruption(what + ": problem.environment.pids is not an integer");
      env.pids = e["pids"].get<int64_t>();
    }
    if (e.contains("cpus")) {
      if (!e["cpus"].is_number()) return Status::Corruption(what + ": problem.environment.cpus is not a number");
      env.cpus = e["cpus"].get<double>();
    }
  }
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
