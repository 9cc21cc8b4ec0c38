#include "sandbox/oci_image.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <random>

#include "sandbox/oci_layer.h"
#include "sandbox/oci_layout.h"
#include "sandbox/unique_fd.h"

namespace flashroll::sandbox {

namespace {

Status MakeDirs(const std::string& path) {
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos == path.size() || path[pos] == '/') {
      const std::string prefix = path.substr(0, pos);
      if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) return Status::FromErrno(errno, "mkdir " + prefix);
    }
  }
  return Status::Ok();
}

// Removes a temporary tree when it goes out of scope (after a successful
// rename there is nothing left to remove).
class TreeGuard {
 public:
  explicit TreeGuard(std::string path) : path_(std::move(path)) {}
  ~TreeGuard() {
    std::error_code ignored;  // best effort: a leftover temporary tree is harmless
    std::filesystem::remove_all(path_, ignored);
  }
  TreeGuard(const TreeGuard&) = delete;
  TreeGuard& operator=(const TreeGuard&) = delete;

 private:
  std::string path_;
};

// Removes the temporary trees of unpacks whose process is gone (killed
// mid-unpack): ".unpack-<digest prefix>-<pid>-<random>".
void RemoveAbandonedUnpacks(const std::string& cache_dir) {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(cache_dir, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(".unpack-", 0) != 0) continue;
    const size_t pid_start = name.find('-', 8);
    if (pid_start == std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::strtol(name.c_str() + pid_start + 1, nullptr, 10));
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) TreeGuard remove(entry.path().string());
  }
}

}  // namespace

Result<std::string> EnsureOciImage(const std::string& layout_dir, const std::string& ref,
                                   const OciImageOptions& options) {
  FR_ASSIGN_OR_RETURN(OciDescriptor manifest, SelectOciManifest(layout_dir, ref));
  const std::string dir = options.cache_dir + "/" + manifest.digest_hex;
  struct stat st {};
  if (::lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return dir;
  FR_ASSIGN_OR_RETURN(std::vector<OciLayer> layers, ReadOciManifest(layout_dir, manifest));

  FR_RETURN_IF_ERROR(MakeDirs(options.cache_dir));
  RemoveAbandonedUnpacks(options.cache_dir);
  std::random_device rd;
  const std::string tmp = options.cache_dir + "/.unpack-" + manifest.digest_hex.substr(0, 12) + "-" +
                          std::to_string(::getpid()) + "-" + std::to_string(rd());
  if (::mkdir(tmp.c_str(), 0700) != 0) return Status::FromErrno(errno, "mkdir " + tmp);
  TreeGuard guard(tmp);
  UniqueFd root(::open(tmp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!root.valid()) return Status::FromErrno(errno, "open " + tmp);
  OciUnpackBudget budget{options.max_bytes, options.max_entries};
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string blob = OciBlobPath(layers[i].blob.digest_hex);
    Status status = ApplyOciLayer(root.get(), layout_dir + "/" + blob, layers[i], &budget);
    if (!status.ok()) {
      return status.Wrap(blob + " (layer " + std::to_string(i + 1) + " of " + std::to_string(layers.size()) + ")");
    }
  }
  if (::fchmod(root.get(), 0755) != 0) return Status::FromErrno(errno, "chmod " + tmp);
  if (::rename(tmp.c_str(), dir.c_str()) != 0 && errno != EEXIST && errno != ENOTEMPTY) {
    // EEXIST, ENOTEMPTY: another process finished first; its tree is as good.
    return Status::FromErrno(errno, "rename " + tmp + " to " + dir);
  }
  return dir;
}

}  // namespace flashroll::sandbox
