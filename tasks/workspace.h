// Workspace: where an agent's tool calls run — a working directory and a way
// to execute a shell command in it.
//
// The sandbox module provides the isolated implementation; LocalWorkspace
// runs commands as plain subprocesses in a scratch directory and exists for
// synthesising demonstrations of trusted reference solutions, never for
// running a model's commands.
//
// Thread safety: a Workspace is used by one thread at a time.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "common/status.h"

namespace flashroll {

struct ExecResult {
  int exit_code = 0;    // 124 on timeout, 128+N when killed by signal N
  std::string stdout_text;
  std::string stderr_text;
  bool timed_out = false;
};

class Workspace {
 public:
  virtual ~Workspace() = default;
  // Paths are relative to the working directory; "..", absolute paths are refused.
  virtual Status WriteFile(const std::string& path, const std::string& contents) = 0;
  virtual Result<std::string> ReadFile(const std::string& path) = 0;
  // Runs `bash -c command` in the working directory.
  virtual Result<ExecResult> Exec(const std::string& command, std::chrono::milliseconds timeout) = 0;
  // Ends the agent's part of an episode and returns where its outcome is
  // checked: a new workspace whose working directory is a copy of this
  // one's as the agent left it, in which no process the agent started runs
  // or can run. This workspace is not used afterwards. kResourceExhausted
  // when the working directory is too large to copy (the agent's doing).
  virtual Result<std::unique_ptr<Workspace>> ForVerification() = 0;
};

// OK for a relative path that stays inside the working directory; otherwise
// kInvalidArgument naming the path (absolute, or climbing out with "..").
Status CheckWorkspacePath(const std::string& path);

// A scratch directory under $TMPDIR (or /tmp), removed on destruction.
// ForVerification copies it to a new one; a command's background processes
// are killed with its process group, but one that left that group lives on:
// this workspace runs trusted reference solutions only.
class LocalWorkspace : public Workspace {
 public:
  static Result<std::unique_ptr<LocalWorkspace>> Create();
  ~LocalWorkspace() override;

  Status WriteFile(const std::string& path, const std::string& contents) override;
  Result<std::string> ReadFile(const std::string& path) override;
  Result<ExecResult> Exec(const std::string& command, std::chrono::milliseconds timeout) override;
  Result<std::unique_ptr<Workspace>> ForVerification() override;

  const std::string& dir() const { return dir_; }

 private:
  explicit LocalWorkspace(std::string dir) : dir_(std::move(dir)) {}
  Result<std::string> Resolve(const std::string& path) const;
  std::string dir_;
};

}  // namespace flashroll
