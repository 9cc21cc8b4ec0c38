#include "sandbox/reclaim.h"

#include "common/log.h"
#include "sandbox/naming.h"
#include "sandbox/veth.h"

namespace flashroll::sandbox {

Result<std::vector<std::string>> ReclaimLeftovers(CgroupBackend& backend) {
  FR_ASSIGN_OR_RETURN(std::vector<std::string> names, backend.List());
  std::vector<std::string> removed;
  for (const auto& name : names) {
    if (OwnerAlive(name)) continue;
    FR_RETURN_IF_ERROR(backend.RemoveLeftover(name).Wrap("reclaim " + name));
    log::Info("sandbox reclaimed", {{"id", name}});
    removed.push_back(name);
  }
  FR_ASSIGN_OR_RETURN(std::vector<std::string> veths, ReclaimVeths());
  removed.insert(removed.end(), veths.begin(), veths.end());
  return removed;
}

}  // namespace flashroll::sandbox
