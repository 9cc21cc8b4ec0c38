#include "sandbox/bpf_pins.h"

#include <dirent.h>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>

#include "sandbox/naming.h"

namespace flashroll::sandbox {

namespace {

constexpr char kBpfFs[] = "/sys/fs/bpf";

bool IsBpfFs(const char* path) {
  struct statfs st {};
  return ::statfs(path, &st) == 0 && static_cast<unsigned long>(st.f_type) == BPF_FS_MAGIC;
}

}  // namespace

Status EnsureBpfPinRoot() {
  // One mount per process at most, however many sandboxes race here.
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (!IsBpfFs(kBpfFs)) {
    if (::mkdir(kBpfFs, 0700) != 0 && errno != EEXIST) return Status::FromErrno(errno, std::string("mkdir ") + kBpfFs);
    if (::mount("bpf", kBpfFs, "bpf", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0700") != 0) {
      return Status::FromErrno(errno, std::string("mount bpffs at ") + kBpfFs);
    }
  }
  if (::mkdir(kBpfPinRoot, 0700) != 0 && errno != EEXIST) {
    return Status::FromErrno(errno, std::string("mkdir ") + kBpfPinRoot);
  }
  return Status::Ok();
}

std::string BpfPinDir(const std::string& sandbox_name) { return std::string(kBpfPinRoot) + "/" + sandbox_name; }

Result<std::vector<std::string>> ListBpfPinDirs() {
  std::vector<std::string> names;
  DIR* dir = ::opendir(kBpfPinRoot);
  if (dir == nullptr) {
    if (errno == ENOENT) return names;
    return Status::FromErrno(errno, std::string("opendir ") + kBpfPinRoot);
  }
  while (dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.rfind(kNamePrefix, 0) == 0) names.push_back(name);
  }
  ::closedir(dir);
  return names;
}

Status RemoveBpfPins(const std::string& sandbox_name) {
  const std::string path = BpfPinDir(sandbox_name);
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) {
    if (errno == ENOENT) return Status::Ok();
    return Status::FromErrno(errno, "opendir " + path);
  }
  Status first;
  while (dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    if (::unlinkat(::dirfd(dir), name.c_str(), 0) != 0 && errno != ENOENT && first.ok()) {
      first = Status::FromErrno(errno, "unlink " + path + "/" + name);
    }
  }
  ::closedir(dir);
  if (::rmdir(path.c_str()) != 0 && errno != ENOENT && first.ok()) first = Status::FromErrno(errno, "rmdir " + path);
  return first;
}

}  // namespace flashroll::sandbox
