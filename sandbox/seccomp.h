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

// Installs `program` on the calling thread. no_new_privs must already be set.
ChildStatus SeccompChild(const SeccompProgram& program);

}  // namespace flashroll::sandbox
