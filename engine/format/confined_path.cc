#include "engine/format/confined_path.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace flashroll::engine {
namespace {

// Closes a descriptor on scope exit unless released.
class FdOwner {
 public:
  explicit FdOwner(int fd) : fd_(fd) {}
  ~FdOwner() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdOwner(const FdOwner&) = delete;
  FdOwner& operator=(const FdOwner&) = delete;
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

const char* FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

Result<std::unique_ptr<ConfinedRoot>> ConfinedRoot::Open(const std::string& root) {
  const int fd = ::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOTDIR) return Status::InvalidArgument(root + ": not a directory");
    return Status::FromErrno(errno, "open checkpoint root " + root);
  }
  return std::unique_ptr<ConfinedRoot>(new ConfinedRoot(root, fd));
}

ConfinedRoot::~ConfinedRoot() { ::close(fd_); }

Result<int> ConfinedRoot::OpenRegularFile(const std::string& relative) const {
  const std::string what = "\"" + relative + "\" beneath the checkpoint root " + path_;
  if (relative.empty()) return Status::InvalidArgument("an empty path names no file beneath the checkpoint root " + path_);
  // The kernel refuses these too (EXDEV); saying why up front reads better.
  if (relative[0] == '/') return Status::PermissionDenied(what + ": an absolute path; give one relative to the root");
  open_how how{};
  how.flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC;
  // RESOLVE_BENEATH alone refuses magic links today (EXDEV);
  // RESOLVE_NO_MAGICLINKS states it rather than relying on that.
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  // glibc 2.36 has no openat2 wrapper.
  FdOwner fd(static_cast<int>(::syscall(SYS_openat2, fd_, relative.c_str(), &how, sizeof(how))));
  if (fd.get() < 0) {
    switch (errno) {
      case EXDEV:
        return Status::PermissionDenied(what + ": resolves outside the root (\"..\" or a symlink leading out)");
      case ELOOP:
        return Status::PermissionDenied(what + ": a magic link or a loop of symlinks");
      case ENXIO:  // a socket, which cannot be opened as a file
        return Status::PermissionDenied(what + ": not a regular file");
      case ENOTDIR:  // a file, FIFO or device where the path needs a directory
        return Status::PermissionDenied(what + ": a component of the path is not a directory");
      case ENOSYS:
        return Status::Unimplemented("openat2 " + what + ": this kernel has no openat2 (Linux 5.6 or later)");
      default:
        return Status::FromErrno(errno, "openat2 " + what);
    }
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno(errno, "fstat " + what);
  if (!S_ISREG(st.st_mode)) {
    return Status::PermissionDenied(what + ": " + FileKind(st.st_mode) + ", not a regular file");
  }
  return fd.release();
}

Result<std::unique_ptr<MappedFile>> ConfinedRoot::Map(const std::string& relative) const {
  FR_ASSIGN_OR_RETURN(int raw, OpenRegularFile(relative));
  FdOwner fd(raw);
  return MappedFile::FromFd(fd.get(), path_ + "/" + relative);
}

DirectoryFileMapper ConfinedRoot::MapperFor(const std::string& relative) const {
  std::string prefix = relative;
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  return [this, prefix](const std::string& name) { return Map(prefix.empty() ? name : prefix + "/" + name); };
}

}  // namespace flashroll::engine
