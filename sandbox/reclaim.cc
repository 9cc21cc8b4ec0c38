#include "sandbox/reclaim.h"

#include <set>

#include "common/log.h"
#include "sandbox/apparmor.h"
#include "sandbox/bpf_pins.h"
#include "sandbox/naming.h"
#include "sandbox/veth.h"

namespace flashroll::sandbox {

Status ReclaimSandbox(CgroupBackend& backend, const std::string& name) {
  // The processes go first: the pins keep the network policy on them
  // until then.
  FR_RETURN_IF_ERROR(backend.RemoveLeftover(name).Wrap("reclaim " + name));
  return RemoveBpfPins(name).Wrap("reclaim " + name);
}

Result<Reclaimed> ReclaimLeftovers(CgroupBackend& backend) {
  FR_ASSIGN_OR_RETURN(std::vector<std::string> names, backend.List());
  // Pins of sandboxes whose cgroups are gone already (a manager killed
  // between removing the cgroups and the pins) are reclaimed too.
  FR_ASSIGN_OR_RETURN(std::vector<std::string> pinned, ListBpfPinDirs());
  std::set<std::string> all(names.begin(), names.end());
  all.insert(pinned.begin(), pinned.end());
  Reclaimed reclaimed;
  for (const auto& name : all) {
    if (OwnerAlive(name)) continue;
    if (Status status = ReclaimSandbox(backend, name); !status.ok()) {
      log::Warn("sandbox reclaim failed", {{"id", name}, {"error", status.ToString()}});
      reclaimed.failed.emplace_back(name, std::move(status));
      continue;
    }
    log::Info("sandbox reclaimed", {{"id", name}});
    reclaimed.removed.push_back(name);
  }
  FR_ASSIGN_OR_RETURN(std::vector<std::string> veths, ReclaimVeths());
  reclaimed.removed.insert(reclaimed.removed.end(), veths.begin(), veths.end());
  FR_ASSIGN_OR_RETURN(std::vector<std::string> profiles, ReclaimAppArmorProfiles());
  reclaimed.removed.insert(reclaimed.removed.end(), profiles.begin(), profiles.end());
  return reclaimed;
}

}  // namespace flashroll::sandbox
