// SandboxWorkspace: a Workspace inside an isolated sandbox — where a model's
// commands run. The working directory is /tmp/work, inside the sandbox's
// writable layer (a tree that exists at launch, so the sandbox's Landlock
// rules let the agent write there); the sandbox is created here and
// destroyed with the workspace.
//
// ForVerification ends the agent's part: it freezes the sandbox (no process
// of the agent's runs from then on), copies /tmp/work out of it
// (sandbox/tree_snapshot.h), destroys it (the cgroup is killed and the init
// reaped: every process the agent started is gone) and returns a workspace
// over that copy: files are read from it in memory; the first command
// creates a fresh sandbox of the same spec with the copy at /tmp/work.
// Nothing else the agent changed comes along: not a patched test runner or
// library elsewhere in its writable root, not its home directory, not a
// process it left behind.
//
// Thread safety: one thread at a time per workspace; the Manager is shared.
#pragma once

#include <memory>
#include <string>

#include "sandbox/sandbox.h"
#include "tasks/task.h"
#include "tasks/workspace.h"

namespace flashroll {

// The sandbox for `task`: the job's spec with the task's environment over
// it. InvalidArgument naming the task and the environment field (an image
// other than a built-in one, a bad allow rule, allow without net policy,
// limits out of range: sandbox::ValidateSpec); PermissionDenied naming the
// field and the ceiling for a limit the task asks above `ceilings`
// ("task t: environment.pids: 5000 is above the job's ceiling of 4096
// (sandbox.max.pids)"). The job's own spec is not checked against them.
Result<sandbox::SandboxSpec> TaskSandboxSpec(const sandbox::SandboxSpec& job, const Task& task,
                                             const TaskCeilings& ceilings = TaskCeilings());

class SandboxWorkspace : public Workspace {
 public:
  // Exec: an error (kUnavailable) only when the sandbox was gone before the
  // command started; a sandbox that dies while it runs is a result (exit
  // 137, stderr says so): the command may have caused it.
  static Result<std::unique_ptr<SandboxWorkspace>> Create(sandbox::Manager& manager,
                                                          const sandbox::SandboxSpec& spec);
  ~SandboxWorkspace() override;

  Status WriteFile(const std::string& path, const std::string& contents) override;
  Result<std::string> ReadFile(const std::string& path) override;
  Result<ExecResult> Exec(const std::string& command, std::chrono::milliseconds timeout) override;
  Result<std::unique_ptr<Workspace>> ForVerification() override;

  const std::string& id() const { return id_; }

 private:
  SandboxWorkspace(sandbox::Manager& manager, sandbox::SandboxSpec spec, std::string id)
      : manager_(manager), spec_(std::move(spec)), id_(std::move(id)) {}

  sandbox::Manager& manager_;
  const sandbox::SandboxSpec spec_;
  std::string id_;
  bool destroyed_ = false;  // by ForVerification
  Status WriteAsAgent(const std::string& full, const std::string& contents);

  // The agent's commands run as the sandbox's root (else files are written
  // as its user: WriteFile).
  bool agent_is_root_ = true;
};

}  // namespace flashroll
