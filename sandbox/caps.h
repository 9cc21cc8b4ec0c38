// The privilege step: a bounded capability set in the sandbox's own user
// namespace, and no_new_privs.
//
// Root inside (uid 0 of the sandbox's user namespace) keeps the capability
// set a container runtime grants by default (kSandboxCapabilities: chown,
// bypassing file permissions, set-id, kill, binding ports below 1024,
// chroot, ...), so that software which changes owners or drops privileges
// (chown, su, setpriv --init-groups, postgres) runs. Every other capability
// leaves the bounding set for good: CAP_SYS_ADMIN, CAP_SYS_MODULE,
// CAP_SYS_PTRACE, CAP_NET_ADMIN and the rest can never come back.
//
// What the kept ones reach: a capability held in a user namespace acts only
// on what that namespace owns or maps. The sandbox's mount, network, pid,
// IPC and UTS namespaces belong to the host's user namespace (userns.h,
// kMapped), so the kept set gives no power over them; files are affected
// only where their owner and group are ids of the sandbox's own range (its
// layers, what it created on an rw bind), never a host user's file; and
// kill reaches only processes of its own namespace (another sandbox is in
// another pid and user namespace, and Landlock scopes signals besides).
//
// Across exec: the securebits stay the kernel's defaults, so an exec as
// uid 0 gets the whole bounded set again, and a process that changes to a
// non-zero uid loses its capabilities (a non-root exec user, `su nobody`),
// as for root on a host. Inheritable and ambient sets start empty, as in a
// container runtime: a non-root user holds nothing unless root inside
// raises ambient capabilities for it. no_new_privs makes set-uid binaries
// and file capabilities inert (an exec never gains beyond what its caller
// held) and lets an unprivileged process install the seccomp filter.
//
// Thread safety: PrepareCapsParentSide is stateless; CapsChild runs only in
// the freshly cloned child.
#pragma once

#include <linux/capability.h>

#include <cstdint>

#include "common/status.h"
#include "sandbox/child_status.h"

namespace flashroll::sandbox {

// Docker's default set less CAP_MKNOD (a sandbox makes no device nodes),
// CAP_NET_RAW (raw sockets would bypass what the network policy assumes of
// a socket) and CAP_SETFCAP (file capabilities are inert under
// no_new_privs anyway).
inline constexpr int kSandboxCapabilities[] = {
    CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER,           CAP_FSETID,     CAP_KILL,        CAP_SETGID,
    CAP_SETUID, CAP_SETPCAP,     CAP_NET_BIND_SERVICE, CAP_SYS_CHROOT, CAP_AUDIT_WRITE,
};

// The kept set as a 64-bit mask (bit N: capability N).
constexpr uint64_t SandboxCapabilityMask() {
  uint64_t mask = 0;
  for (int cap : kSandboxCapabilities) mask |= uint64_t{1} << cap;
  return mask;
}

struct CapsPlan {
  int last_cap = 0;  // from /proc/sys/kernel/cap_last_cap
  uint64_t keep = SandboxCapabilityMask();
};

// Reads the kernel's highest capability number.
Result<CapsPlan> PrepareCapsParentSide();

// Runs after the sandbox's init has become uid 0 of its user namespace
// (which gave it every capability there): empties the bounding set but for
// `plan.keep`, clears the ambient and inheritable sets, sets the permitted
// and effective sets to `plan.keep`, and sets no_new_privs. Any failure
// fails the sandbox: a sandbox with more capabilities than planned is not
// one.
ChildStatus CapsChild(const CapsPlan& plan);

}  // namespace flashroll::sandbox
