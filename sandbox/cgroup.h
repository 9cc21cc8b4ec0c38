// Cgroups of one sandbox, behind one interface for two kernel layouts.
//
// Limits (memory, pids, CPU quota, cpuset) go wherever the kernel offers
// them: cgroup v1 hierarchies in the hybrid layout, the v2 tree when it has
// controllers. Kill, freeze and BPF attachment always use a fresh cgroup v2
// directory per sandbox, which clone3(CLONE_INTO_CGROUP) places the init
// process in. A v2 cgroup that was killed SIGKILLs later CLONE_INTO_CGROUP
// children, so a directory is never reused: every sandbox has a unique name.
//
// All directories are <root>/flashroll/<name>; names start with the sandbox
// prefix (naming.h) so reclaim can find what a killed manager left behind.
//
// Thread safety: a CgroupBackend may be shared across threads after Open.
// A Cgroup is used by one thread at a time (its sandbox's owner).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "sandbox/child_status.h"
#include "sandbox/unique_fd.h"

namespace flashroll::sandbox {

struct CgroupLimits {
  uint64_t memory_bytes = 0;  // 0: none
  int64_t pids = 0;           // 0: none
  double cpus = 0;            // 0: none
  std::string cpuset;         // empty: the manager's CPUs
  // Where limits live in hierarchies of their own (cgroup v1), a sandbox
  // joins only those of the limits it has (memory always: its OOM count):
  // each join is a migration that waits on the kernel's cgroup lock, about
  // 2 ms on a busy VM. Set for a sandbox whose limits come later (the warm
  // pool's): it joins every hierarchy.
  bool every_hierarchy = false;
};

class Cgroup {
 public:
  virtual ~Cgroup() = default;

  const std::string& name() const { return name_; }

  // The v2 directory, for clone3(CLONE_INTO_CGROUP) and BPF attachment
  // before the launch. Owned by this object; -1 once AttachParentSide ran.
  virtual int clone_into_fd() const = 0;

  // Parent side of the launch: moves `pid` into the hierarchies that
  // CLONE_INTO_CGROUP does not reach (the v1 ones). A sandbox has one init,
  // so this is the launch's last step: it closes the descriptors the launch
  // needed (the v2 directory, the v1 cgroup.procs files), which an idle
  // sandbox would otherwise hold. Returns kIoError naming the file on
  // failure.
  virtual Status AttachParentSide(pid_t pid) = 0;

  // Sets the limits given in `limits`; fields at 0 or empty are left as they
  // are. Used at creation and when a pre-started sandbox is handed out.
  // Returns kIoError naming the file that could not be written.
  virtual Status ApplyLimits(const CgroupLimits& limits) = 0;

  // SIGKILLs every process in the sandbox (cgroup.kill). Does not wait.
  virtual Status Kill() = 0;

  // Freezes or thaws every process; returns once the kernel reports the
  // new state, or kDeadlineExceeded after 2 s.
  virtual Status SetFrozen(bool frozen) = 0;

  // How many processes the kernel OOM-killed in this sandbox so far.
  virtual Result<uint64_t> OomKillCount() = 0;

  // A descriptor to poll for the sandbox's memory events: it reports
  // `events` (EPOLLIN or EPOLLPRI) when the memory controller records an
  // OOM (v1: an eventfd registered on memory.oom_control; v2: memory.events,
  // which the kernel notifies on change). After a report, call
  // DrainOomNotifier and compare OomKillCount() to tell a kill. Returns
  // kIoError naming the file on failure.
  struct OomNotifier {
    UniqueFd fd;
    uint32_t events = 0;
  };
  virtual Result<OomNotifier> OpenOomNotifier() = 0;

  // Whether the sandbox is frozen now (cgroup.events).
  virtual Result<bool> Frozen() = 0;

  // Forgets the cgroups without touching them: the destructor then leaves
  // the directories and their processes (a kept sandbox whose manager
  // stops, sandbox.h).
  virtual void Abandon() = 0;

  // Removes every directory. Processes must be gone (killed and reaped);
  // retries briefly while the kernel finishes tearing them down. Returns
  // kIoError naming the directory that could not be removed.
  virtual Status Remove() = 0;

 protected:
  explicit Cgroup(std::string name) : name_(std::move(name)) {}

 private:
  std::string name_;
};

class CgroupBackend {
 public:
  virtual ~CgroupBackend() = default;

  // "hybrid" (v1 limits, v2 control) or "unified" (v2 only).
  virtual const char* layout() const = 0;

  // Creates the cgroups of a new sandbox with `limits` applied. A limit the
  // layout cannot apply is an error, never skipped. Returns kAlreadyExists
  // if `name` is taken.
  virtual Result<std::unique_ptr<Cgroup>> Create(const std::string& name, const CgroupLimits& limits) = 0;

  // The cgroups of a sandbox that exist already (a kept sandbox a manager
  // before this one created): kNotFound when they are gone.
  virtual Result<std::unique_ptr<Cgroup>> Adopt(const std::string& name) = 0;

  // Names of all sandbox cgroups that exist now, from any manager.
  virtual Result<std::vector<std::string>> List() = 0;

  // Kills every process in the cgroups called `name` and removes them: the
  // clean-up of a sandbox whose manager died.
  virtual Status RemoveLeftover(const std::string& name) = 0;
};

// Clears a notifier's readiness after a report (reads the eventfd counter,
// or re-reads memory.events from the start).
void DrainOomNotifier(const Cgroup::OomNotifier& notifier);

// Child side: a new cgroup namespace rooted at the sandbox's cgroups, so
// /proc/self/cgroup inside shows "/" and not the host's hierarchy. Runs
// after the parent has attached the child everywhere.
ChildStatus CgroupNamespaceChild();

// Detects the layout under /sys/fs/cgroup and prepares the flashroll/
// directories. Returns kFailedPrecondition when no usable layout exists
// (no cgroup v2 mount to kill and freeze with), kPermissionDenied when not
// root.
Result<std::unique_ptr<CgroupBackend>> OpenCgroupBackend();

}  // namespace flashroll::sandbox
