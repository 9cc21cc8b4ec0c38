#include "rollout/sandbox_workspace.h"

#include <filesystem>

#include "common/log.h"

namespace flashroll {

Result<sandbox::SandboxSpec> TaskSandboxSpec(const sandbox::SandboxSpec& job, const Task& task) {
  const TaskEnvironment& env = task.environment;
  const std::string what = "task " + task.id + ": environment.";
  sandbox::SandboxSpec spec = job;
  if (!env.image.empty()) {
    if (env.image != "host" && env.image != "busybox") {
      return Status::InvalidArgument(what + "image: '" + env.image + "' is not a built-in image (host, busybox)");
    }
    if (Status s = sandbox::ParseImage(env.image, &spec); !s.ok()) return s.Wrap(what + "image");
  }
  if (env.memory_bytes) spec.memory_bytes = *env.memory_bytes;
  if (env.disk_bytes) spec.disk_bytes = *env.disk_bytes;
  if (env.pids) spec.pids = *env.pids;
  if (env.cpus) spec.cpus = *env.cpus;
  if (!env.net.empty()) {
    auto net = sandbox::ParseNetMode(env.net);
    if (!net.ok()) return net.status().Wrap(what + "net");
    spec.net = *net;
    spec.allow.clear();
  }
  for (size_t i = 0; i < env.allow.size(); ++i) {
    auto rule = sandbox::ParseAllowRule(env.allow[i]);
    if (!rule.ok()) return rule.status().Wrap(what + "allow[" + std::to_string(i) + "]");
    spec.allow.push_back(*rule);
  }
  if (Status s = sandbox::ValidateSpec(spec); !s.ok()) return s.Wrap(what.substr(0, what.size() - 1));
  return spec;
}
namespace {

constexpr const char* kWorkDir = "/tmp/work";

}  // namespace

Result<std::unique_ptr<SandboxWorkspace>> SandboxWorkspace::Create(sandbox::Manager& manager,
                                                                   const sandbox::SandboxSpec& spec) {
  FR_ASSIGN_OR_RETURN(std::string id, manager.Create(spec));
  std::unique_ptr<SandboxWorkspace> workspace(new SandboxWorkspace(manager, id));
  sandbox::ExecRequest mkdir;
  mkdir.argv = {"/bin/mkdir", "-p", kWorkDir};
  mkdir.timeout = std::chrono::seconds(10);
  FR_ASSIGN_OR_RETURN(sandbox::ExecResult made, manager.Exec(id, mkdir));
  if (made.exit_code != 0) {
    return Status::Internal("sandbox " + id + ": mkdir " + kWorkDir + " exited " +
                            std::to_string(made.exit_code) + ": " + made.stderr_data);
  }
  return workspace;
}

SandboxWorkspace::~SandboxWorkspace() {
  Status destroyed = manager_.Destroy(id_);
  if (!destroyed.ok()) log::Error("sandbox destroy failed", {{"id", id_}, {"error", destroyed.message()}});
}

Status SandboxWorkspace::WriteFile(const std::string& path, const std::string& contents) {
  FR_RETURN_IF_ERROR(CheckWorkspacePath(path));
  const std::string full = std::string(kWorkDir) + "/" + path;
  const std::string parent = std::filesystem::path(full).parent_path();
  if (parent != kWorkDir) {
    sandbox::ExecRequest mkdir;
    mkdir.argv = {"/bin/mkdir", "-p", parent};
    mkdir.timeout = std::chrono::seconds(10);
    FR_ASSIGN_OR_RETURN(sandbox::ExecResult made, manager_.Exec(id_, mkdir));
    if (made.exit_code != 0) return Status::IoError("sandbox " + id_ + ": mkdir " + parent + " failed");
  }
  return manager_.PutFile(id_, full, contents);
}

Result<std::string> SandboxWorkspace::ReadFile(const std::string& path) {
  FR_RETURN_IF_ERROR(CheckWorkspacePath(path));
  return manager_.GetFile(id_, std::string(kWorkDir) + "/" + path);
}

Result<ExecResult> SandboxWorkspace::Exec(const std::string& command, std::chrono::milliseconds timeout) {
  sandbox::ExecRequest request;
  request.argv = {"/bin/bash", "-c", command};
  request.cwd = kWorkDir;
  request.timeout = timeout;
  request.max_output_bytes = size_t{1} << 20;
  FR_ASSIGN_OR_RETURN(sandbox::ExecResult result, manager_.Exec(id_, request));
  ExecResult out;
  out.exit_code = result.timed_out ? 124 : result.exit_code;
  out.timed_out = result.timed_out;
  out.stdout_text = std::move(result.stdout_data);
  out.stderr_text = std::move(result.stderr_data);
  return out;
}

}  // namespace flashroll
