#include "sandbox/reclaim.h"

#include <map>
#include <string_view>

#include "common/log.h"
#include "sandbox/naming.h"
#include "sandbox/veth.h"

namespace flashroll::sandbox {

namespace {

Result<std::vector<std::string>> Reclaim(CgroupBackend& backend,
                                         const std::function<bool(const std::string&)>& owner_alive) {
  FR_ASSIGN_OR_RETURN(std::vector<std::string> names, backend.List());
  std::vector<std::string> removed;
  // By owner, the name up to its last '-' (prefix, pid, start time).
  std::map<std::string, bool, std::less<>> alive;
  for (const auto& name : names) {
    const std::string_view owner = std::string_view(name).substr(0, name.rfind('-'));
    auto it = alive.find(owner);
    if (it == alive.end()) it = alive.emplace(std::string(owner), owner_alive(name)).first;
    if (it->second) continue;
    FR_RETURN_IF_ERROR(backend.RemoveLeftover(name).Wrap("reclaim " + name));
    log::Info("sandbox reclaimed", {{"id", name}});
    removed.push_back(name);
  }
  FR_ASSIGN_OR_RETURN(std::vector<std::string> veths, ReclaimVeths());
  removed.insert(removed.end(), veths.begin(), veths.end());
  return removed;
}

}  // namespace

Result<std::vector<std::string>> ReclaimLeftovers(CgroupBackend& backend) { return Reclaim(backend, OwnerAlive); }

Result<std::vector<std::string>> TEST_ReclaimLeftovers(CgroupBackend& backend,
                                                       const std::function<bool(const std::string&)>& owner_alive) {
  return Reclaim(backend, owner_alive);
}

}  // namespace flashroll::sandbox
