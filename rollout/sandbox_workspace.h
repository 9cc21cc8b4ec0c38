// SandboxWorkspace: a Workspace inside an isolated sandbox — where a model's
// commands run. The working directory is /tmp/work, inside the sandbox's
// writable layer (a tree that exists at launch, so the sandbox's Landlock
// rules let the agent write there); the sandbox is created here and
// destroyed with the workspace.
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
// limits out of range: sandbox::ValidateSpec).
Result<sandbox::SandboxSpec> TaskSandboxSpec(const sandbox::SandboxSpec& job, const Task& task);

class SandboxWorkspace : public Workspace {
 public:
  static Result<std::unique_ptr<SandboxWorkspace>> Create(sandbox::Manager& manager,
                                                          const sandbox::SandboxSpec& spec);
  ~SandboxWorkspace() override;

  Status WriteFile(const std::string& path, const std::string& contents) override;
  Result<std::string> ReadFile(const std::string& path) override;
  Result<ExecResult> Exec(const std::string& command, std::chrono::milliseconds timeout) override;

  const std::string& id() const { return id_; }

 private:
  SandboxWorkspace(sandbox::Manager& manager, std::string id) : manager_(manager), id_(std::move(id)) {}

  sandbox::Manager& manager_;
  std::string id_;
};

}  // namespace flashroll
