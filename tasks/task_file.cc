#include "tasks/task_file.h"

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "common/config.h"
#include "sandbox/spec.h"

namespace flashroll {
namespace {

Schema TaskSchema() {
  return Schema::Map()
      .Required("id", Schema::String())
      .Required("prompt", Schema::String())
      .Optional("difficulty", Schema::Int(1, kMaxDifficulty))
      .Optional("files", Schema::List(Schema::Map().Required("path", Schema::String()).Required("contents", Schema::String())))
      .Optional("setup", Schema::List(Schema::String()))
      .Optional("answer", Schema::String())
      .Optional("answer_file", Schema::String())
      .Optional("environment", Schema::Map()
                                   .Optional("image", Schema::Enum({"host", "busybox"}))
                                   .Optional("memory", Schema::ByteSize(4ull << 20))
                                   .Optional("disk", Schema::ByteSize(1ull << 20))
                                   .Optional("pids", Schema::Int(1, 1'000'000))
                                   .Optional("cpus", Schema::Float(0.01, 1024))
                                   .Optional("net", Schema::Enum({"none", "policy"}))
                                   .Optional("allow", Schema::List(Schema::String()))
                                   // USER[:GROUP] or :GROUP, read by ParseUserGroup below.
                                   .Optional("user", Schema::String()))
      .Optional("verifier", Schema::Map()
                                .Required("kind", Schema::Enum({"exact", "regex", "python", "tests"}))
                                .Optional("tolerance", Schema::Float(0, 1))
                                .Optional("pattern", Schema::String())
                                .Optional("script", Schema::String())
                                .Optional("test_command", Schema::String())
                                .Optional("fail_to_pass", Schema::List(Schema::String()))
                                .Optional("pass_to_pass", Schema::List(Schema::String()))
                                .Optional("files", Schema::List(Schema::Map().Required("path", Schema::String()).Required("contents", Schema::String()))));
}

// A JSON Lines file as one YAML flow sequence whose items sit on the lines
// they came from, so every error names the file's own line.
std::string JsonLinesAsYaml(const std::string& text) {
  std::istringstream in(text);
  std::string out = "[", line;
  bool first = true;
  while (std::getline(in, line)) {
    const bool blank = line.find_first_not_of(" \t\r") == std::string::npos;
    if (!blank) {
      out += (first ? "" : ",") + line;
      first = false;
    }
    out += "\n";
  }
  return out + "]\n";
}

// The checks the schema cannot express, for one validated task node.
Status CheckTask(const ConfigFile& file, const YAML::Node& node, const std::string& key, Task* task) {
  const auto error = [&](const YAML::Node& at, const std::string& field, const std::string& what) {
    return file.ErrorAt(at.IsDefined() ? at : node, key + "." + field, what);
  };
  task->family = "file";
  task->id = ReadString(node, "id", "");
  task->prompt = ReadString(node, "prompt", "");
  task->difficulty = static_cast<int>(ReadInt(node, "difficulty", 1));
  task->answer = ReadString(node, "answer", "");
  task->answer_file = ReadString(node, "answer_file", "");
  if (node["setup"].IsDefined()) task->setup = ReadStringList(node, "setup");
  if (task->id.empty()) return error(node["id"], "id", "must not be empty");
  if (const YAML::Node files = node["files"]; files.IsDefined()) {
    for (size_t i = 0; i < files.size(); ++i) {
      TaskFile f{ReadString(files[i], "path", ""), ReadString(files[i], "contents", "")};
      const std::string field = "files[" + std::to_string(i) + "].path";
      if (Status s = CheckWorkspacePath(f.path); !s.ok()) return error(files[i]["path"], field, s.message());
      task->files.push_back(std::move(f));
    }
  }
  if (!task->answer_file.empty()) {
    if (Status s = CheckWorkspacePath(task->answer_file); !s.ok()) return error(node["answer_file"], "answer_file", s.message());
  }
  if (const YAML::Node e = node["environment"]; e.IsDefined()) {
    TaskEnvironment& env = task->environment;
    env.image = ReadString(e, "image", "");
    if (e["memory"].IsDefined()) env.memory_bytes = ReadByteSize(e, "memory", 0);
    if (e["disk"].IsDefined()) env.disk_bytes = ReadByteSize(e, "disk", 0);
    if (e["pids"].IsDefined()) env.pids = ReadInt(e, "pids", 0);
    if (e["cpus"].IsDefined()) env.cpus = ReadFloat(e, "cpus", 0);
    env.net = ReadString(e, "net", "");
    if (e["allow"].IsDefined()) env.allow = ReadStringList(e, "allow");
    if (!env.allow.empty() && env.net != "policy") {
      return error(e["allow"], "environment.allow", "needs environment.net: policy");
    }
    if (e["user"].IsDefined()) {
      const std::string user = ReadString(e, "user", "");
      if (user.empty()) return error(e["user"], "environment.user", "expected USER[:GROUP] or :GROUP, got an empty string");
      if (Status s = sandbox::ParseUserGroup(user, &env.user, &env.group); !s.ok()) {
        return error(e["user"], "environment.user", s.message());
      }
    }
  }
  const YAML::Node v = node["verifier"];
  TaskCheck& c = task->check;
  if (v.IsDefined()) {
    c.kind = ReadString(v, "kind", c.kind);
    if (v["tolerance"].IsDefined()) c.tolerance = ReadFloat(v, "tolerance", 0);
    c.pattern = ReadString(v, "pattern", "");
    c.script = ReadString(v, "script", "");
    c.test_command = ReadString(v, "test_command", "");
    if (v["fail_to_pass"].IsDefined()) c.fail_to_pass = ReadStringList(v, "fail_to_pass");
    if (v["pass_to_pass"].IsDefined()) c.pass_to_pass = ReadStringList(v, "pass_to_pass");
    if (const YAML::Node files = v["files"]; files.IsDefined()) {
      for (size_t i = 0; i < files.size(); ++i) {
        TaskFile f{ReadString(files[i], "path", ""), ReadString(files[i], "contents", "")};
        const std::string field = "verifier.files[" + std::to_string(i) + "].path";
        if (Status s = CheckWorkspacePath(f.path); !s.ok()) return error(files[i]["path"], field, s.message());
        c.files.push_back(std::move(f));
      }
    }
  }
  const YAML::Node at = v.IsDefined() ? v : node;
  if (c.kind == "exact" && !node["answer"].IsDefined()) return error(node["answer"], "answer", "required by the exact verifier");
  if (c.tolerance && c.kind != "exact") return error(v["tolerance"], "verifier.tolerance", "only the exact verifier takes a tolerance");
  if (c.kind == "regex") {
    if (c.pattern.empty()) return error(at["pattern"], "verifier.pattern", "required by the regex verifier");
    try {
      (void)std::regex(c.pattern, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      return error(v["pattern"], "verifier.pattern", std::string("not a valid ECMAScript regex: ") + e.what());
    }
  }
  if (!c.files.empty() && c.kind != "python" && c.kind != "tests") {
    return error(v["files"], "verifier.files", "only the python and tests verifiers run with files of their own");
  }
  if (c.kind == "python" && c.script.empty()) return error(at["script"], "verifier.script", "required by the python verifier");
  if (c.kind == "tests") {
    if (c.test_command.empty()) return error(at["test_command"], "verifier.test_command", "required by the tests verifier");
    if (c.fail_to_pass.empty()) return error(at["fail_to_pass"], "verifier.fail_to_pass", "the tests verifier needs at least one test that must start passing");
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<Task>> LoadTaskFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("task file " + path + ": cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  const bool json_lines = path.size() >= 6 && path.compare(path.size() - 6, 6, ".jsonl") == 0;
  FR_ASSIGN_OR_RETURN(ConfigFile file, ParseYaml(json_lines ? JsonLinesAsYaml(text.str()) : text.str(), path));
  YAML::Node list = file.root;
  std::string prefix = "tasks";
  if (!json_lines) {
    FR_RETURN_IF_ERROR(Schema::Map().Required("tasks", Schema::List(TaskSchema(), 1)).Validate(file.root, path));
    list = file.root["tasks"];
  } else {
    FR_RETURN_IF_ERROR(Schema::List(TaskSchema(), 1).Validate(file.root, path));
    prefix = "";
  }
  std::vector<Task> tasks;
  std::set<std::string> ids;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string key = prefix + "[" + std::to_string(i) + "]";
    Task task;
    FR_RETURN_IF_ERROR(CheckTask(file, list[i], key, &task));
    if (!ids.insert(task.id).second) return file.ErrorAt(list[i]["id"], key + ".id", "duplicate id '" + task.id + "'");
    tasks.push_back(std::move(task));
  }
  return tasks;
}

}  // namespace flashroll
