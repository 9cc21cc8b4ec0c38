#include "sandbox/tree_cache.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <random>

namespace flashroll::sandbox {

namespace {

constexpr char kTemporaryPrefix[] = ".unpack-";

// Removes the temporary trees of builders whose process is gone.
void RemoveAbandonedBuilds(const std::string& cache_dir) {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(cache_dir, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kTemporaryPrefix, 0) != 0) continue;
    // ...-<pid>-<random>: the pid is the second field from the end.
    const size_t random_dash = name.rfind('-');
    const size_t pid_dash = random_dash == std::string::npos || random_dash == 0 ? std::string::npos
                                                                                 : name.rfind('-', random_dash - 1);
    if (pid_dash == std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::strtol(name.c_str() + pid_dash + 1, nullptr, 10));
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) RemoveTree(entry.path().string());
  }
}

}  // namespace

Status MakeDirs(const std::string& path, mode_t mode) {
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos == path.size() || path[pos] == '/') {
      const std::string prefix = path.substr(0, pos);
      if (::mkdir(prefix.c_str(), mode) != 0 && errno != EEXIST) return Status::FromErrno(errno, "mkdir " + prefix);
    }
  }
  return Status::Ok();
}

void RemoveTree(const std::string& path) {
  std::error_code ignored;
  std::filesystem::remove_all(path, ignored);
}

Result<std::string> EnsureTree(const std::string& dir, const std::function<Status(const std::string& tmp)>& build) {
  if (::access(dir.c_str(), F_OK) == 0) return dir;
  const size_t slash = dir.rfind('/');
  const std::string parent = dir.substr(0, slash);
  FR_RETURN_IF_ERROR(MakeDirs(parent, 0755));
  RemoveAbandonedBuilds(parent);
  std::random_device rd;
  const std::string tmp = parent + "/" + kTemporaryPrefix + dir.substr(slash + 1, 12) + "-" +
                          std::to_string(::getpid()) + "-" + std::to_string(rd());
  if (::mkdir(tmp.c_str(), 0700) != 0) return Status::FromErrno(errno, "mkdir " + tmp);
  Status status = build(tmp);
  if (status.ok() && ::chmod(tmp.c_str(), 0755) != 0) status = Status::FromErrno(errno, "chmod " + tmp);
  // EEXIST, ENOTEMPTY: another builder finished first; its tree is as good.
  if (status.ok() && ::rename(tmp.c_str(), dir.c_str()) != 0 && errno != EEXIST && errno != ENOTEMPTY) {
    status = Status::FromErrno(errno, "rename " + tmp + " to " + dir);
  }
  RemoveTree(tmp);
  if (!status.ok()) return status;
  return dir;
}

}  // namespace flashroll::sandbox
