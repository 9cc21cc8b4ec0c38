// The cgroup layouts (internal to sandbox/; picked by OpenCgroupBackend, or
// by the manager for an unprivileged caller).
//
// Thread safety: as CgroupBackend.
#pragma once

#include <memory>
#include <string>

#include "sandbox/cgroup.h"

namespace flashroll::sandbox {

// Limits in cgroup v1 hierarchies mounted at <v1_root>/<controller>;
// kill and freeze through the cgroup v2 tree at `v2_root`.
Result<std::unique_ptr<CgroupBackend>> OpenHybridCgroupBackend(const std::string& v1_root,
                                                               const std::string& v2_root);

// Everything through the cgroup v2 tree at `root`, which must offer the
// memory, pids, cpu and cpuset controllers.
Result<std::unique_ptr<CgroupBackend>> OpenUnifiedCgroupBackend(const std::string& root);

// No cgroups at all (layout "none"): for a manager without root, whose
// sandboxes run in user namespaces without limits. Limits are accepted and
// not applied; freeze fails with kFailedPrecondition.
std::unique_ptr<CgroupBackend> NewNoCgroupBackend();

}  // namespace flashroll::sandbox
