#include "rollout/sandbox_workspace.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <functional>
#include <optional>
#include <utility>

#include "common/log.h"
#include "sandbox/unique_fd.h"

namespace flashroll {

namespace {

std::string Bytes(uint64_t bytes) {
  for (const auto& [shift, unit] : {std::pair{30, "G"}, std::pair{20, "M"}, std::pair{10, "K"}}) {
    if (bytes >= (uint64_t{1} << shift) && bytes % (uint64_t{1} << shift) == 0) {
      return std::to_string(bytes >> shift) + unit;
    }
  }
  return std::to_string(bytes);
}

// kPermissionDenied when the task's `field` asks `asked` above `ceiling`.
template <typename T>
Status WithinCeiling(const std::string& what, const char* field, const std::optional<T>& asked, T ceiling,
                     const std::function<std::string(T)>& text) {
  if (!asked || *asked <= ceiling) return Status::Ok();
  return Status::PermissionDenied(what + field + ": " + text(*asked) + " is above the job's ceiling of " +
                                  text(ceiling) + " (sandbox.max." + field + ")");
}

}  // namespace

Result<sandbox::SandboxSpec> TaskSandboxSpec(const sandbox::SandboxSpec& job, const Task& task,
                                             const TaskCeilings& ceilings) {
  const TaskEnvironment& env = task.environment;
  const std::string what = "task " + task.id + ": environment.";
  const std::function<std::string(uint64_t)> bytes = Bytes;
  const std::function<std::string(int64_t)> count = [](int64_t n) { return std::to_string(n); };
  const std::function<std::string(double)> cpus = [](double n) {
    std::string text = std::to_string(n);
    text.erase(text.find_last_not_of('0') + 1);
    if (text.back() == '.') text.pop_back();
    return text;
  };
  FR_RETURN_IF_ERROR(WithinCeiling(what, "memory", env.memory_bytes, ceilings.memory_bytes, bytes));
  FR_RETURN_IF_ERROR(WithinCeiling(what, "disk", env.disk_bytes, ceilings.disk_bytes, bytes));
  FR_RETURN_IF_ERROR(WithinCeiling(what, "pids", env.pids, ceilings.pids, count));
  FR_RETURN_IF_ERROR(WithinCeiling(what, "cpus", env.cpus, ceilings.cpus, cpus));
  if (env.allow.size() > ceilings.allow_rules) {
    return Status::PermissionDenied(what + "allow: " + std::to_string(env.allow.size()) +
                                    " rules are above the job's ceiling of " + std::to_string(ceilings.allow_rules) +
                                    " (sandbox.max.allow_rules)");
  }
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
  if (!env.user.empty() || !env.group.empty()) {
    spec.user = env.user;
    spec.group = env.group;
  }
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
  std::unique_ptr<SandboxWorkspace> workspace(new SandboxWorkspace(manager, spec, id));
  // Made as the agent's user (the spec's, else the image's), who owns it.
  sandbox::ExecRequest mkdir;
  mkdir.argv = {"/bin/sh", "-c", std::string("mkdir -p ") + kWorkDir + " && id -u"};
  mkdir.timeout = std::chrono::seconds(10);
  FR_ASSIGN_OR_RETURN(sandbox::ExecResult made, manager.Exec(id, mkdir));
  if (made.exit_code != 0) {
    return Status::Internal("sandbox " + id + ": mkdir " + kWorkDir + " exited " +
                            std::to_string(made.exit_code) + ": " + made.stderr_data);
  }
  workspace->agent_is_root_ = made.stdout_data == "0\n";
  return workspace;
}

SandboxWorkspace::~SandboxWorkspace() {
  if (destroyed_) return;
  Status destroyed = manager_.Destroy(id_);
  // kNotFound: its init died and the crash watcher destroyed it already.
  if (!destroyed.ok() && destroyed.code() != Code::kNotFound) {
    log::Error("sandbox destroy failed", {{"id", id_}, {"error", destroyed.message()}});
  }
}

namespace {

// Where a verdict is taken: the agent's working directory as a snapshot in
// memory, and a fresh sandbox of the agent's spec made from it only when a
// check runs a command (an answer file is read from the snapshot: no
// sandbox at all). Files the check writes before that go into the snapshot.
class CopiedWorkspace : public Workspace {
 public:
  CopiedWorkspace(sandbox::Manager& manager, sandbox::SandboxSpec spec, sandbox::TreeSnapshot snapshot)
      : manager_(manager), spec_(std::move(spec)), snapshot_(std::move(snapshot)) {}

  Status WriteFile(const std::string& path, const std::string& contents) override {
    FR_RETURN_IF_ERROR(CheckWorkspacePath(path));
    if (sandbox_) return sandbox_->WriteFile(path, contents);
    const std::string normal = Normal(path);
    // The check's file wins over whatever the agent left on its way: a
    // file or link where a directory goes is dropped, as is what was at
    // `normal` (a whole tree, for a directory).
    std::string parent;
    for (size_t slash = normal.find('/'); slash != std::string::npos; slash = normal.find('/', slash + 1)) {
      parent = normal.substr(0, slash);
      const sandbox::TreeEntry* at = Find(parent);
      if (at != nullptr && at->kind == sandbox::TreeEntry::Kind::kDirectory) continue;
      Remove(parent);
      snapshot_.entries.push_back({parent, sandbox::TreeEntry::Kind::kDirectory, 0755, ""});
    }
    Remove(normal);
    snapshot_.entries.push_back({normal, sandbox::TreeEntry::Kind::kFile, 0644, contents});
    return Status::Ok();
  }

  Result<std::string> ReadFile(const std::string& path) override {
    FR_RETURN_IF_ERROR(CheckWorkspacePath(path));
    if (sandbox_) return sandbox_->ReadFile(path);
    const sandbox::TreeEntry* entry = Find(Normal(path));
    if (entry == nullptr) return Status::NotFound("read " + path + ": no such file in the workspace");
    if (entry->kind != sandbox::TreeEntry::Kind::kFile) return Status::InvalidArgument("read " + path + ": not a regular file");
    return entry->data;
  }

  Result<ExecResult> Exec(const std::string& command, std::chrono::milliseconds timeout) override {
    FR_RETURN_IF_ERROR(Materialize());
    return sandbox_->Exec(command, timeout);
  }

  Result<std::unique_ptr<Workspace>> ForVerification() override {
    FR_RETURN_IF_ERROR(Materialize());
    return sandbox_->ForVerification();
  }

 private:
  static std::string Normal(const std::string& path) {
    return std::filesystem::path(path).lexically_normal().generic_string();
  }

  const sandbox::TreeEntry* Find(const std::string& path) const {
    for (const sandbox::TreeEntry& e : snapshot_.entries) {
      if (e.path == path) return &e;
    }
    return nullptr;
  }

  // Drops `path` and everything beneath it.
  void Remove(const std::string& path) {
    std::erase_if(snapshot_.entries, [&](const sandbox::TreeEntry& e) {
      return e.path == path || e.path.starts_with(path + "/");
    });
  }

  Status Materialize() {
    if (sandbox_) return Status::Ok();
    FR_ASSIGN_OR_RETURN(sandbox_, SandboxWorkspace::Create(manager_, spec_));
    return manager_.RestoreSnapshot(sandbox_->id(), kWorkDir, snapshot_);
  }

  sandbox::Manager& manager_;
  const sandbox::SandboxSpec spec_;
  sandbox::TreeSnapshot snapshot_;
  std::unique_ptr<SandboxWorkspace> sandbox_;
};

}  // namespace

Result<std::unique_ptr<Workspace>> SandboxWorkspace::ForVerification() {
  FR_RETURN_IF_ERROR(manager_.Freeze(id_));
  auto snapshot = manager_.SnapshotFrozen(id_, kWorkDir);
  destroyed_ = true;
  // Before anything is judged: Destroy returns once the init is reaped, so
  // no process of the agent's outlives it (one that does makes it fail).
  if (Status s = manager_.Destroy(id_); !s.ok()) {
    return Status::FailedPrecondition("the agent's sandbox " + id_ + " was not torn down: " + s.message());
  }
  if (!snapshot.ok()) return snapshot.status();
  return std::unique_ptr<Workspace>(new CopiedWorkspace(manager_, spec_, std::move(*snapshot)));
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
  if (agent_is_root_) return manager_.PutFile(id_, full, contents);
  return WriteAsAgent(full, contents);
}

// The files API acts as the sandbox's root without capabilities, which
// may not write in a directory another user owns; and a file it made
// there would not be the agent's to change. So the agent's user writes
// it: `cat` from a memfd holding the contents.
Status SandboxWorkspace::WriteAsAgent(const std::string& full, const std::string& contents) {
  sandbox::UniqueFd in(::memfd_create("flashroll-task-file", MFD_CLOEXEC));
  sandbox::UniqueFd out(::memfd_create("flashroll-task-file-err", MFD_CLOEXEC));
  if (!in.valid() || !out.valid()) return Status::FromErrno(errno, "sandbox " + id_ + ": memfd_create");
  for (size_t done = 0; done < contents.size();) {
    const ssize_t n = ::write(in.get(), contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(errno, "sandbox " + id_ + ": write memfd");
    done += static_cast<size_t>(n);
  }
  if (::lseek(in.get(), 0, SEEK_SET) != 0) return Status::FromErrno(errno, "sandbox " + id_ + ": lseek memfd");
  sandbox::ExecRequest cat;
  cat.argv = {"/bin/sh", "-c", "cat > \"$1\"", "sh", full};
  cat.stdin_fd = in.get();
  cat.stdout_fd = out.get();
  cat.stderr_fd = out.get();
  cat.timeout = std::chrono::seconds(10);
  FR_ASSIGN_OR_RETURN(sandbox::ExecResult written, manager_.Exec(id_, cat));
  if (written.exit_code == 0) return Status::Ok();
  char said[512] = {};
  const ssize_t n = ::pread(out.get(), said, sizeof(said) - 1, 0);
  return Status::IoError("sandbox " + id_ + ": writing " + full + " as the agent's user exited " +
                         std::to_string(written.exit_code) + (n > 0 ? ": " + std::string(said, static_cast<size_t>(n)) : ""));
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
  // Whose failure a dead sandbox is depends on when it died: before the
  // command started (its init or the manager died while no command of the
  // agent's ran) it is the machinery's, an error; while the command ran,
  // the command may have caused it (rollout/failure_kind.h), so it is the
  // command's result. A death the crash watcher has not seen yet when the
  // command starts counts as the command's: never the other way round.
  const auto started = std::chrono::system_clock::now();
  Result<sandbox::SandboxInfo> before = manager_.Info(id_);
  if (!before.ok() || before->state != sandbox::State::kRunning) {
    return Status::Unavailable("sandbox " + id_ + " was gone before the command started: " +
                               (before.ok() ? std::string(sandbox::StateName(before->state)) : before.status().ToString()));
  }
  Result<sandbox::ExecResult> ran = manager_.Exec(id_, request);
  if (!ran.ok()) {
    if (auto events = manager_.EventsSince(id_, 0); events.ok()) {
      for (const sandbox::SandboxEvent& event : events->events) {
        if (event.kind == sandbox::EventKind::kInitExit && event.time < started) {
          return ran.status().Wrap("sandbox " + id_ + ": its init exited before the command started");
        }
      }
    }
    ExecResult died;
    died.exit_code = 137;
    died.stderr_text = "the sandbox died while the command ran: " + ran.status().ToString();
    return died;
  }
  sandbox::ExecResult& result = *ran;
  ExecResult out;
  out.exit_code = result.timed_out ? 124 : result.exit_code;
  out.timed_out = result.timed_out;
  out.stdout_text = std::move(result.stdout_data);
  out.stderr_text = std::move(result.stderr_data);
  return out;
}

}  // namespace flashroll
