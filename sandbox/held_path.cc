#include "sandbox/held_path.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include <cerrno>
#include <filesystem>

namespace flashroll::sandbox {

Result<std::shared_ptr<const HeldPath>> HoldOpenPath(UniqueFd fd, std::string path) {
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno(errno, "rw path: fstat " + path);
  struct stat root {};
  if (::stat("/", &root) != 0) return Status::FromErrno(errno, "stat /");
  if (st.st_dev == root.st_dev && st.st_ino == root.st_ino) {
    return Status::InvalidArgument("rw path '" + path + "': is the host root; binding it is not allowed");
  }
  auto held = std::make_shared<HeldPath>();
  held->path = std::move(path);
  held->fd = std::move(fd);
  held->dev = st.st_dev;
  held->ino = st.st_ino;
  held->mode = st.st_mode;
  return std::shared_ptr<const HeldPath>(std::move(held));
}

Result<std::shared_ptr<const HeldPath>> HoldHostPath(const std::string& path) {
  if (path.empty() || path[0] != '/') return Status::InvalidArgument("rw path '" + path + "': must be absolute");
  open_how how {};
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  UniqueFd fd(static_cast<int>(::syscall(SYS_openat2, AT_FDCWD, path.c_str(), &how, sizeof(how))));
  if (!fd.valid()) {
    if (errno == ELOOP) {
      return Status::InvalidArgument("rw path '" + path +
                                     "': a component is a symlink; rw paths are opened without following "
                                     "symlinks, so pass its real path");
    }
    return Status::FromErrno(errno, "rw path: open " + path);
  }
  // Bound inside at its normal form: "/a//b/" is "/a/b", as the mount
  // plan's one directory per component needs (with no symlink and no ".."
  // on the way, which ValidateSpec refuses, it names what openat2 opened).
  std::string normal = std::filesystem::path(path).lexically_normal().string();
  while (normal.size() > 1 && normal.back() == '/') normal.pop_back();
  return HoldOpenPath(std::move(fd), std::move(normal));
}

}  // namespace flashroll::sandbox
