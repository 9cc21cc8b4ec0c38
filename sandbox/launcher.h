// The launcher: clone3 into fresh namespaces and the sandbox's cgroup, then
// the one-byte parent/child handshake.
//
//   parent                                child (new mnt, pid, net, uts, ipc
//                                          namespaces; in the v2 cgroup)
//   clone3(CLONE_INTO_CGROUP|CLONE_PIDFD) -> mounts, hostname, loopback
//   AttachParentSide (v1 cgroups)            (overlapping the parent's work)
//   before_go (e.g. veth into the netns)
//   writes the go byte                    -> waits for it; then cgroup ns,
//                                            the user namespace (userns.h),
//                                            caps, seccomp, execveat(init)
// A rootless child is cloned into a user namespace instead, whose id maps
// the parent writes before the go byte, which the child then waits for
// before anything else.
//   reads the handshake socket: EOF means the init is running (the socket is
//   close-on-exec); a ChildStatusMessage means a step failed.
//
// Thread safety: LaunchInit may run on several threads at once.
#pragma once

#include <sys/types.h>

#include <functional>

#include "common/status.h"
#include "sandbox/cgroup.h"
#include "sandbox/contain.h"
#include "sandbox/unique_fd.h"

namespace flashroll::sandbox {

struct InitProcess {
  pid_t pid = -1;    // in the host's pid namespace
  UniqueFd pidfd;
  UniqueFd control;  // the manager's end of the init control socket
};

// Starts a contained init. On failure the child is killed and reaped and
// the failing step is returned (e.g. "mount: pivot_root /run/flashroll/root:
// ..."); the cgroup is left to the caller. `before_go`, when set, runs in the
// parent after the clone and before the child is let go (e.g. to move a
// veth into the child's network namespace); its failure fails the launch.
Result<InitProcess> LaunchInit(const ContainPlan& plan, Cgroup& cgroup,
                               const std::function<Status(pid_t)>& before_go = nullptr);

// SIGKILLs the init (which takes its whole pid namespace with it) and
// waits until it has been reaped.
Status KillAndReapInit(InitProcess& init);

}  // namespace flashroll::sandbox
