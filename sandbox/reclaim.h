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

#include <string>
#include <vector>

#include "common/status.h"
#include "sandbox/cgroup.h"

namespace flashroll::sandbox {

// Returns the names of the sandboxes (and veth interfaces) it removed, or
// the first failure.
Result<std::vector<std::string>> ReclaimLeftovers(CgroupBackend& backend);

}  // namespace flashroll::sandbox
