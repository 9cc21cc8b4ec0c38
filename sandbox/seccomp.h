// The syscall step: a seccomp filter in the spirit of Docker's default
// profile, compiled once per process with libseccomp.
//
// Default deny. The filter lists what a sandbox may call: the system calls
// Docker's default profile allows a process without capabilities, on x86-64
// and aarch64. Anything it does not list fails with ENOSYS, as on a kernel
// without that call, so a call a newer kernel (or one newer than the
// libseccomp we build with) adds is refused, and libc falls back to an older
// one. clone3 is left out on purpose: its flags lie in memory a filter
// cannot read, and libc falls back to clone, whose flags the filter checks.
//
// EPERM, the kernel's own answer to a caller without the privilege, for
// what a sandbox must never do: mount and the new mount API, pivot_root,
// chroot, unshare and setns and namespace flags in clone, ptrace and
// cross-process memory access, kexec, kernel modules, bpf, perf, keyrings,
// swap, reboot, clocks, quotas, io_uring, userfaultfd, file handles, raw
// I/O ports, syslog, terminal injection (TIOCSTI, TIOCLINUX) and vsock
// sockets (which no network namespace confines). Sockets are limited to the
// unix, IP and netlink families, personality() to the Linux personas.
// Other architectures' system calls kill the process.
//
// The filter is installed last, after the mounts, the caps step and
// Landlock, right before the execveat of the sandbox's init; the init and
// everything it starts run under it.
//
// A sandbox may instead name a profile file (sandbox/seccomp_profile.h);
// it is parsed and compiled in the parent, and the compiled program is
// cached by path and modification time.
//
// Thread safety: DefaultSeccompProgram and SeccompProgramFor may be called
// from any thread; the programs they return are immutable and live for the
// process.
#pragma once

#include <linux/filter.h>

#include <string>
#include <vector>

#include "common/status.h"
#include "sandbox/child_status.h"

namespace flashroll::sandbox {

struct SeccompProgram {
  std::vector<sock_filter> instructions;
};

// The compiled default profile. Returns kInternal when libseccomp fails;
// the error is cached, and a sandbox is never started without a filter.
Result<const SeccompProgram*> DefaultSeccompProgram();

// The program for a sandbox's profile choice: "default" or the path of a
// JSON profile file. A file is compiled on first use and again whenever its
// modification time changes; every version compiled stays alive for the
// process, so plans holding the pointer never dangle. Returns
// kInvalidArgument "<path>: <field>: <problem>" for a bad profile, the
// stat/read error for a missing file, kInternal when libseccomp fails.
Result<const SeccompProgram*> SeccompProgramFor(const std::string& choice);

// The default filter's rules as an OCI runtime-spec `linux.seccomp` object
// (the JSON Docker's profiles use too: defaultAction, defaultErrnoRet,
// architectures, syscalls with names, action, errnoRet and args), for other
// runtimes to run under the same rules (bench/sandbox_oneshot.sh). Names
// the native architecture lacks are left out, as in the compiled filter.
// Returns the JSON text.
std::string DefaultSeccompOciJson();

// Installs `program` on the calling thread. no_new_privs must already be set.
ChildStatus SeccompChild(const SeccompProgram& program);

}  // namespace flashroll::sandbox
