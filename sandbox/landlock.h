// Landlock: the unprivileged LSM step of the sandbox, applied in the child.
//
// A LandlockRules says which paths a sandbox may read, write and execute,
// which TCP ports it may bind and connect to, and whether it is cut off from
// signalling processes and reaching abstract unix sockets outside its own
// Landlock domain. ApplyLandlock turns that into a ruleset for the running
// kernel and enforces it on the calling thread; the restriction is inherited
// by every later child and survives execve.
//
// Fail closed: each feature the rules ask for (filesystem, TCP ports,
// scoping) must be fully enforceable by the kernel's Landlock ABI, or
// ApplyLandlock fails, unless the rules mark that feature best-effort.
// PlanLandlock holds that decision as a pure function of the rules and an ABI
// version, so it can be checked for every ABI on any kernel.
//
// The step has the launcher's two halves: PrepareLandlockParentSide (probe
// and plan, before clone) and LandlockChild (raw syscalls in the child);
// ApplyLandlock runs both for a single-threaded caller.
//
// Thread safety: PlanLandlock, LandlockAbiVersion and
// PrepareLandlockParentSide may be called from any thread. LandlockChild and
// ApplyLandlock restrict only the calling thread (Landlock ABI < 8 has no
// thread sync), so call them in a single-threaded child before exec.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "sandbox/child_status.h"

namespace flashroll::sandbox {

struct LandlockRules {
  // Filesystem. When restrict_fs is set, every access the kernel's Landlock
  // knows is denied except beneath these paths (directories cover their whole
  // subtree; a regular file path covers that file):
  //   read_only_paths:  read files, list directories;
  //   executable_paths: read_only plus execute;
  //   read_write_paths: everything except execute (create, write, remove,
  //                     rename within the granted trees, truncate, device ioctl).
  //                     List a path in executable_paths too to run files there.
  //   tree_paths:       read and execute, and create, remove and rename
  //                     entries (files, directories, symlinks, sockets, fifos),
  //                     but no writes to existing files, no truncation, no
  //                     device nodes and no device ioctls.
  // Paths are resolved when ApplyLandlock runs, so pass paths as the child
  // sees them (after pivot_root). A missing path is an error unless
  // skip_missing_paths is set (for defaults that list conventional
  // directories an image may lack; a skipped path grants nothing).
  bool restrict_fs = true;
  bool skip_missing_paths = false;
  std::vector<std::string> read_only_paths;
  std::vector<std::string> read_write_paths;
  std::vector<std::string> executable_paths;
  std::vector<std::string> tree_paths;

  // TCP. When set, bind(2) / connect(2) on TCP sockets is denied (EACCES)
  // except to the listed ports. UDP and other protocols are not covered by
  // Landlock; the eBPF network policy covers them.
  bool restrict_tcp_bind = false;
  std::vector<uint16_t> tcp_bind_ports;
  bool restrict_tcp_connect = false;
  std::vector<uint16_t> tcp_connect_ports;

  // Scoping: deny signals to, and abstract unix socket connections to,
  // processes outside this Landlock domain (the sandbox's own processes stay
  // reachable).
  bool scope_signals = false;
  bool scope_abstract_unix_sockets = false;

  // Best effort per feature: when the kernel cannot enforce a requested
  // feature fully, apply what it can instead of failing. Off by default.
  bool best_effort_fs = false;
  bool best_effort_tcp = false;
  bool best_effort_scope = false;
};

// What a ruleset will handle on a given ABI. Bit values are Landlock's UAPI
// values (LANDLOCK_ACCESS_FS_*, LANDLOCK_ACCESS_NET_*, LANDLOCK_SCOPE_*).
struct LandlockPlan {
  int abi = 0;                     // 0: Landlock is not used at all
  uint64_t handled_access_fs = 0;  // denied unless a path rule grants it
  uint64_t handled_access_net = 0;
  uint64_t scoped = 0;
  // Features that were requested but could not be fully enforced (only
  // possible for features marked best-effort).
  bool fs_degraded = false;
  bool tcp_degraded = false;
  bool scope_degraded = false;
};

// Returns the Landlock ABI version of the running kernel (1..N), or
// FailedPrecondition naming the syscall when Landlock is not built in or is
// disabled at boot.
Result<int> LandlockAbiVersion();

// Returns the plan for `rules` on a kernel offering `abi` (0 = no Landlock),
// or FailedPrecondition naming the first requested feature the ABI cannot
// enforce and that is not best-effort. Rules that request nothing give a plan
// with abi 0.
Result<LandlockPlan> PlanLandlock(const LandlockRules& rules, int abi);

// Parent side: probes the kernel's ABI and plans `rules` for it. Returns the
// plan (abi 0 when nothing is to be enforced), FailedPrecondition as
// PlanLandlock does (naming the probe syscall when Landlock is absent), or
// the probe's errno status.
Result<LandlockPlan> PrepareLandlockParentSide(const LandlockRules& rules);

// Child side, after pivot_root and no_new_privs, before exec: opens the rule
// paths (as the child sees them), builds the ruleset and restricts the
// calling thread. Makes raw system calls only and allocates nothing, so it is
// safe between clone3() and execve() of a multithreaded parent; `rules` and
// `plan` must stay alive until the ChildStatus is reported (its arg points
// into rules' paths). Returns Ok, or the failed call and path under step
// "landlock": e.g. open(O_PATH) of a missing path, or landlock_restrict_self
// with EPERM when no_new_privs is not set (required even with
// CAP_SYS_ADMIN, so that nothing exec'd later can shed the domain through a
// set-uid binary).
ChildStatus LandlockChild(const LandlockRules& rules, const LandlockPlan& plan);

// Both halves in one call, for a single-threaded process (tests, tools).
// Returns OK once enforced (and fills *plan, if given, with the plan);
// FailedPrecondition for no Landlock, a missing feature, or no_new_privs not
// set; otherwise the failed syscall and path, e.g. "landlock: open(O_PATH)
// /data: No such file or directory".
Status ApplyLandlock(const LandlockRules& rules, LandlockPlan* plan = nullptr);

}  // namespace flashroll::sandbox
