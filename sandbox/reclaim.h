// Start-up reclaim: removes what managers that were killed left behind.
//
// A sandbox's processes usually die with its manager (the init exits when
// its control socket closes, taking its pid namespace and mounts with it),
// but a frozen sandbox's init cannot notice: it and its processes stay,
// frozen, in their cgroups. What can remain are those cgroups (and
// processes), the pinned BPF links of a --net policy sandbox (bpf_pins.h:
// pinned so the policy holds as long as anything of the sandbox runs), and,
// for a manager killed while starting a --net policy sandbox, a veth pair
// still in the host's network namespace. Their names (the veth's ifalias)
// carry the creating manager's pid and start time (naming.h); those whose
// manager is gone are killed (cgroup.kill reaches frozen processes too),
// then their pins, directories and AppArmor profiles (apparmor.h) are
// removed. Live managers' sandboxes are left alone. No host mount is per
// sandbox (mount.h), so none is left.
//
// Thread safety: safe to run concurrently with other managers.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "sandbox/cgroup.h"

namespace flashroll::sandbox {

// Removes what is left of the dead manager's sandbox `name`: kills and
// removes its cgroups, then removes its pins. Safe to call again after a
// failure. Returns the first failed step, naming it.
Status ReclaimSandbox(CgroupBackend& backend, const std::string& name);

struct Reclaimed {
  std::vector<std::string> removed;  // sandboxes, veth interfaces and AppArmor profiles
  // Sandboxes that could not be removed (e.g. a process in uninterruptible
  // sleep keeps a cgroup populated), with why. The others are removed all
  // the same; the manager hands these to its reaper, so a stuck leftover
  // never keeps a manager from starting.
  std::vector<std::pair<std::string, Status>> failed;
};

// Reclaims every leftover of managers that are gone. Returns what it did,
// or the failure that kept it from looking (listing the cgroups, pins,
// veths or profiles). Each manager's liveness is looked up once, however
// many sandboxes it has (a one-shot `sandbox run` beside a node with
// thousands of live sandboxes otherwise read /proc once per sandbox).
Result<Reclaimed> ReclaimLeftovers(CgroupBackend& backend);

// The same with the liveness check given (naming.h's OwnerAlive above), for
// tests that count its calls.
Result<Reclaimed> TEST_ReclaimLeftovers(CgroupBackend& backend,
                                        const std::function<bool(const std::string&)>& owner_alive);

}  // namespace flashroll::sandbox
