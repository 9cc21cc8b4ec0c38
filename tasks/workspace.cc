#include "tasks/workspace.h"

#include <filesystem>

namespace flashroll {

Status CheckWorkspacePath(const std::string& path) {
  if (path.empty() || path[0] == '/') return Status::InvalidArgument("path '" + path + "' must be relative");
  for (const auto& part : std::filesystem::path(path)) {
    if (part == "..") return Status::InvalidArgument("path '" + path + "' leaves the workspace");
  }
  return Status::Ok();
}

}  // namespace flashroll
