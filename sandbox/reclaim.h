// Start-up reclaim: removes what managers that were killed left behind.
//
// A sandbox's processes die with its manager (the init exits when its
// control socket closes, taking its pid namespace and mounts with it), so
// what can remain are cgroup directories and, for a manager killed while
// starting a --net policy sandbox, a veth pair still in the host's network
// namespace. Their names (the veth's ifalias) carry the creating manager's
// pid and start time (naming.h); those whose manager is gone are emptied
// and removed. Live managers' sandboxes are left alone. BPF links need no
// reclaim: they are held by the manager's descriptors and go with it.
//
// Thread safety: safe to run concurrently with other managers.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "sandbox/cgroup.h"

namespace flashroll::sandbox {

// Returns the names of the sandboxes (and veth interfaces) it removed, or
// the first failure. Each manager's liveness is looked up once, however
// many sandboxes it has (a one-shot `sandbox run` beside a node with
// thousands of live sandboxes otherwise read /proc once per sandbox).
Result<std::vector<std::string>> ReclaimLeftovers(CgroupBackend& backend);

// The same with the liveness check given (naming.h's OwnerAlive above), for
// tests that count its calls.
Result<std::vector<std::string>> TEST_ReclaimLeftovers(CgroupBackend& backend,
                                                       const std::function<bool(const std::string&)>& owner_alive);

}  // namespace flashroll::sandbox
