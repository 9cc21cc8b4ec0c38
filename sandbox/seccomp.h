// The syscall step: a seccomp filter in the spirit of Docker's default
// profile, compiled once per process with libseccomp.
//
// Default allow, with EPERM for what a sandbox must never do: mount and the
// new mount API, pivot_root, ptrace and cross-process memory access,
// kexec, kernel modules, bpf, perf, unshare and setns, namespace flags in
// clone, keyrings, swap, reboot, clocks, quotas, io_uring, userfaultfd,
// open_by_handle_at, terminal injection (TIOCSTI) and vsock sockets (which
// no network namespace confines). clone3 returns ENOSYS so libc falls back
// to clone, whose flags the filter can inspect. Other architectures' system
// calls kill the process.
//
// Thread safety: DefaultSeccompProgram may be called from any thread; the
// program it returns is immutable and lives for the process.
#pragma once

#include <linux/filter.h>

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

// Installs `program` on the calling thread. no_new_privs must already be set.
ChildStatus SeccompChild(const SeccompProgram& program);

}  // namespace flashroll::sandbox
