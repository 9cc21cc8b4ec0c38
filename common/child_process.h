// ChildProcess: a program the caller starts and owns, such as the RL job's
// trainer. The handle is the process: destroying it stops the child and
// everything in its process group (SIGTERM, then SIGKILL after a grace
// period) and reaps it, so no child outlives its owner or stays a zombie. The child also gets SIGTERM if the
// owning thread's process dies (PR_SET_PDEATHSIG), so a SIGKILLed job
// leaves no trainer behind.
//
// Thread safety: one owner; Wait and Stop must not race with each other.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace flashroll {

struct ChildOptions {
  std::vector<std::string> argv;              // argv[0] is the program: a path, or a name looked up in PATH
  std::map<std::string, std::string> env;     // set on top of the parent's environment
  std::string working_dir;                    // empty: the parent's
  std::string output_path;                    // stdout and stderr appended here; empty: inherited
};

class ChildProcess {
 public:
  // Errors: InvalidArgument for an empty argv; IoError naming the output
  // file or the syscall; NotFound when the program cannot be executed (the
  // exec failure is reported by the child through a close-on-exec pipe, so
  // it is known before Start returns).
  static Result<std::unique_ptr<ChildProcess>> Start(const ChildOptions& options);
  ~ChildProcess();  // Stop()
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Waits up to `timeout` (forever when absent) for the child to exit.
  // Returns its exit status — the exit code, or 128 + the signal that
  // ended it — or nullopt while it is still running.
  std::optional<int> Wait(std::optional<std::chrono::milliseconds> timeout = std::nullopt);

  // SIGTERM to the child's process group, then SIGKILL once `grace`
  // passes (and to whatever of the group outlived the child); returns the
  // child's exit status.
  int Stop(std::chrono::milliseconds grace = std::chrono::seconds(5));

  pid_t pid() const { return pid_; }

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  pid_t pid_;
  std::optional<int> status_;  // once reaped
};

}  // namespace flashroll
