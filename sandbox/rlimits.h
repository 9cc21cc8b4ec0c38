// The resource-limit step: every rlimit a sandbox starts with is the
// sandbox's, set in the child before the init runs, never the manager's
// own inherited across the clone (a manager started with a raised
// RLIMIT_NOFILE or unlimited core dumps would hand them to every agent).
//
// The values (kSandboxLimits in rlimits.cc) follow what a container runtime
// gives a process: no core dumps (soft and hard 0: a core_pattern pipe would
// run a host helper for the sandbox's crash), 1024 open files (hard
// 524288), an 8 MiB stack, 8 MiB of locked memory, no real-time or raised
// nice priority, and no limit where the cgroup bounds the resource already
// (processes, memory, CPU). Each hard limit is at most the manager's own:
// raising one needs CAP_SYS_RESOURCE, which a rootless manager, or one in a
// container (this development machine's root lacks it), does not hold;
// lower than the table is never less safe.
//
// Thread safety: PrepareRlimitsParentSide may run on any thread;
// RlimitsChild runs only in the freshly cloned child.
#pragma once

#include <sys/resource.h>

#include "common/status.h"
#include "sandbox/child_status.h"

namespace flashroll::sandbox {

struct RlimitPlan {
  static constexpr int kCount = RLIM_NLIMITS;
  rlimit limits[kCount] = {};  // indexed by RLIMIT_*
};

// The limits of a sandbox, hard limits capped at this process's own.
// Fails only when getrlimit does.
Result<RlimitPlan> PrepareRlimitsParentSide();

// Sets every limit of `plan` but RLIMIT_NOFILE (raw prlimit64 calls). Call
// before the child joins the sandbox's user namespace, while it is still the
// host's root (a soft limit above the inherited one is a raise too).
ChildStatus RlimitsChild(const RlimitPlan& plan);

// Sets RLIMIT_NOFILE. Call after the last step that opens a descriptor
// (ExecInitChild does, just before the exec): the child holds a copy of
// every descriptor the manager has (closed at the init's exec), and the
// kernel refuses a new one numbered at or above the soft limit, so a manager
// holding more than 1,024 (about 250 idle sandboxes) could start no more.
// Needs no privilege (the plan never raises the hard limit); the seccomp
// filter allows prlimit64.
ChildStatus OpenFilesLimitChild(const RlimitPlan& plan);

}  // namespace flashroll::sandbox
