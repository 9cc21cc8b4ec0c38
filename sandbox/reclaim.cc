#include "sandbox/reclaim.h"

#include <map>
#include <set>
#include <string_view>

#include "common/log.h"
#include "sandbox/apparmor.h"
#include "sandbox/bpf_pins.h"
#include "sandbox/kept.h"
#include "sandbox/naming.h"
#include "sandbox/veth.h"

namespace flashroll::sandbox {

Status ReclaimSandbox(CgroupBackend& backend, const std::string& name) {
  // The processes go first: the pins keep the network policy on them
  // until then.
  FR_RETURN_IF_ERROR(backend.RemoveLeftover(name).Wrap("reclaim " + name));
  return RemoveBpfPins(name).Wrap("reclaim " + name);
}

namespace {

Result<Reclaimed> Reclaim(CgroupBackend& backend, const std::function<bool(const std::string&)>& owner_alive) {
  FR_ASSIGN_OR_RETURN(std::vector<std::string> names, backend.List());
  // Pins of sandboxes whose cgroups are gone already (a manager killed
  // between removing the cgroups and the pins) are reclaimed too.
  FR_ASSIGN_OR_RETURN(std::vector<std::string> pinned, ListBpfPinDirs());
  std::set<std::string> all(names.begin(), names.end());
  all.insert(pinned.begin(), pinned.end());
  Reclaimed reclaimed;
  // By owner, the name up to its last '-' (prefix, pid, start time).
  std::map<std::string, bool, std::less<>> alive;
  for (const auto& name : all) {
    // A kept sandbox outlives its manager while its init lives (kept.h).
    if (KeptAlive(name)) continue;
    const std::string_view owner = std::string_view(name).substr(0, name.rfind('-'));
    auto it = alive.find(owner);
    if (it == alive.end()) it = alive.emplace(std::string(owner), owner_alive(name)).first;
    if (it->second) continue;
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

}  // namespace

Result<Reclaimed> ReclaimLeftovers(CgroupBackend& backend) { return Reclaim(backend, OwnerAlive); }

Result<Reclaimed> TEST_ReclaimLeftovers(CgroupBackend& backend,
                                        const std::function<bool(const std::string&)>& owner_alive) {
  return Reclaim(backend, owner_alive);
}

}  // namespace flashroll::sandbox
