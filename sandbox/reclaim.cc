#include "sandbox/reclaim.h"

#include <set>

#include "common/log.h"
#include "sandbox/apparmor.h"
#include "sandbox/bpf_pins.h"
#include "sandbox/naming.h"
#include "sandbox/veth.h"

namespace flashroll::sandbox {

Result<std::vector<std::string>> ReclaimLeftovers(CgroupBackend& backend) {
  FR_ASSIGN_OR_RETURN(std::vector<std::string> names, backend.List());
  // Pins of sandboxes whose cgroups are gone already (a manager killed
  // between removing the cgroups and the pins) are reclaimed too.
  FR_ASSIGN_OR_RETURN(std::vector<std::string> pinned, ListBpfPinDirs());
  std::set<std::string> all(names.begin(), names.end());
  all.insert(pinned.begin(), pinned.end());
  std::vector<std::string> removed;
  for (const auto& name : all) {
    if (OwnerAlive(name)) continue;
    // The processes go first: the pins keep the network policy on them
    // until then.
    FR_RETURN_IF_ERROR(backend.RemoveLeftover(name).Wrap("reclaim " + name));
    FR_RETURN_IF_ERROR(RemoveBpfPins(name).Wrap("reclaim " + name));
    log::Info("sandbox reclaimed", {{"id", name}});
    removed.push_back(name);
  }
  FR_ASSIGN_OR_RETURN(std::vector<std::string> veths, ReclaimVeths());
  removed.insert(removed.end(), veths.begin(), veths.end());
  FR_ASSIGN_OR_RETURN(std::vector<std::string> profiles, ReclaimAppArmorProfiles());
  removed.insert(removed.end(), profiles.begin(), profiles.end());
  return removed;
}

}  // namespace flashroll::sandbox
