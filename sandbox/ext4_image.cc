#include "sandbox/ext4_image.h"

#include <fcntl.h>
#include <linux/loop.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

extern char** environ;

namespace flashroll::sandbox {

namespace {

Status MakeDir(const char* path) {
  if (::mkdir(path, 0700) != 0 && errno != EEXIST) return Status::FromErrno(errno, std::string("disk: mkdir ") + path);
  return Status::Ok();
}

// Runs mkfs.ext4 on `image`: 4 KiB blocks (what the loop device's direct
// I/O wants), one inode per 16 KiB, no reserved blocks, no discard of a
// sparse file; a journal only for a workspace.
Status Mkfs(const std::string& image, Ext4Kind kind) {
  const char* mkfs = nullptr;
  for (const char* candidate : {"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"}) {
    if (::access(candidate, X_OK) == 0) mkfs = candidate;
  }
  if (mkfs == nullptr) {
    return Status::FailedPrecondition("disk: mkfs.ext4 not found (install Debian's e2fsprogs)");
  }
  const char* features = kind == Ext4Kind::kScratch ? "^has_journal,^resize_inode" : "^resize_inode";
  const char* argv[] = {mkfs, "-q", "-F", "-b", "4096", "-i", "16384", "-m", "0", "-O", features,
                        "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", "-L", "flashroll", image.c_str(),
                        nullptr};
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, mkfs, nullptr, nullptr, const_cast<char* const*>(argv), environ);
  if (rc != 0) return Status::FromErrno(rc, std::string("disk: spawn ") + mkfs);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return Status::FromErrno(errno, "disk: waitpid mkfs.ext4");
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Status::IoError("disk: mkfs.ext4 " + image + " failed (status " + std::to_string(status) + ")");
  }
  return Status::Ok();
}

}  // namespace

// Built under a file lock under a temporary name and renamed, so
// concurrent managers never see half of one.
Result<std::string> EnsureExt4Template(uint64_t bytes, Ext4Kind kind) {
  const std::string path = std::string(kDiskTemplateDir) + (kind == Ext4Kind::kScratch ? "/ext4-" : "/ext4j-") +
                           std::to_string(bytes) + ".img";
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return path;
  FR_RETURN_IF_ERROR(MakeDir("/var/lib/flashroll"));
  FR_RETURN_IF_ERROR(MakeDir(kDiskTemplateDir));
  const std::string lock_path = std::string(kDiskTemplateDir) + "/.lock";
  UniqueFd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!lock.valid()) return Status::FromErrno(errno, "disk: open " + lock_path);
  while (::flock(lock.get(), LOCK_EX) != 0) {
    if (errno != EINTR) return Status::FromErrno(errno, "disk: flock " + lock_path);
  }
  if (::stat(path.c_str(), &st) == 0) return path;  // another manager made it meanwhile
  const std::string tmp = path + ".tmp";
  {
    UniqueFd file(::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!file.valid()) return Status::FromErrno(errno, "disk: create " + tmp);
    if (::ftruncate(file.get(), static_cast<off_t>(bytes)) != 0) return Status::FromErrno(errno, "disk: ftruncate " + tmp);
  }
  Status made = Mkfs(tmp, kind);
  if (!made.ok()) {
    ::unlink(tmp.c_str());
    return made;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) return Status::FromErrno(errno, "disk: rename " + tmp);
  return path;
}

Status CopyExt4Template(const std::string& template_path, int image, uint64_t bytes) {
  UniqueFd source(::open(template_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!source.valid()) return Status::FromErrno(errno, "disk: open " + template_path);
  if (::ftruncate(image, static_cast<off_t>(bytes)) != 0) return Status::FromErrno(errno, "disk: ftruncate image");
  off_t offset = 0;
  for (;;) {
    const off_t data = ::lseek(source.get(), offset, SEEK_DATA);
    if (data < 0) {
      if (errno == ENXIO) break;  // no data after `offset`
      return Status::FromErrno(errno, "disk: lseek(SEEK_DATA) " + template_path);
    }
    const off_t hole = ::lseek(source.get(), data, SEEK_HOLE);
    if (hole < 0) return Status::FromErrno(errno, "disk: lseek(SEEK_HOLE) " + template_path);
    loff_t in = data, out = data;
    while (in < hole) {
      const ssize_t n = ::copy_file_range(source.get(), &in, image, &out, static_cast<size_t>(hole - in), 0);
      if (n <= 0) return Status::FromErrno(n < 0 ? errno : EIO, "disk: copy_file_range " + template_path);
    }
    offset = hole;
  }
  return Status::Ok();
}

Result<LoopDevice> AttachLoop(int image) {
  UniqueFd control(::open("/dev/loop-control", O_RDWR | O_CLOEXEC));
  if (!control.valid()) {
    return Status::FailedPrecondition("disk: open /dev/loop-control: " + std::string(std::strerror(errno)) +
                                      " (the loop driver is needed for on-disk filesystems)");
  }
  // Another process may claim the device GET_FREE named before we do.
  for (int attempt = 0; attempt < 32; ++attempt) {
    const int number = ::ioctl(control.get(), LOOP_CTL_GET_FREE);
    if (number < 0) return Status::FromErrno(errno, "disk: ioctl(LOOP_CTL_GET_FREE)");
    LoopDevice loop;
    loop.path = "/dev/loop" + std::to_string(number);
    loop.fd.reset(::open(loop.path.c_str(), O_RDWR | O_CLOEXEC));
    if (!loop.fd.valid()) {
      if (errno == ENOENT || errno == EBUSY) continue;
      return Status::FromErrno(errno, "disk: open " + loop.path);
    }
    struct loop_config config {};
    config.fd = static_cast<uint32_t>(image);
    config.block_size = 4096;
    config.info.lo_flags = LO_FLAGS_AUTOCLEAR | LO_FLAGS_DIRECT_IO;
    if (::ioctl(loop.fd.get(), LOOP_CONFIGURE, &config) == 0) return loop;
    if (errno != EBUSY) return Status::FromErrno(errno, "disk: ioctl(LOOP_CONFIGURE) " + loop.path);
  }
  return Status::Unavailable("disk: every free loop device was taken by someone else 32 times in a row");
}

Result<UniqueFd> MountExt4Detached(const std::string& device) {
  UniqueFd context(::fsopen("ext4", FSOPEN_CLOEXEC));
  if (!context.valid()) return Status::FromErrno(errno, "disk: fsopen(ext4)");
  if (::fsconfig(context.get(), FSCONFIG_SET_STRING, "source", device.c_str(), 0) != 0) {
    return Status::FromErrno(errno, "disk: fsconfig(source=" + device + ")");
  }
  // A copy of the template is a sparse file whose inode tables read as
  // zeros already; zeroing them in the background would write megabytes.
  if (::fsconfig(context.get(), FSCONFIG_SET_FLAG, "noinit_itable", nullptr, 0) != 0) {
    return Status::FromErrno(errno, "disk: fsconfig(noinit_itable)");
  }
  if (::fsconfig(context.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0) {
    return Status::FromErrno(errno, "disk: fsconfig(FSCONFIG_CMD_CREATE) ext4 on " + device);
  }
  UniqueFd mount(::fsmount(context.get(), FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOATIME));
  if (!mount.valid()) return Status::FromErrno(errno, "disk: fsmount " + device);
  return mount;
}

}  // namespace flashroll::sandbox
