#include "sandbox/init_binary.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>

#include "sandbox/init_protocol.h"

// Defined by the generated init_blob.c (see sandbox/CMakeLists.txt).
extern "C" const unsigned char flashroll_sandbox_init_begin[];
extern "C" const unsigned char flashroll_sandbox_init_end[];

namespace flashroll::sandbox {

namespace {

#ifndef MFD_EXEC
#define MFD_EXEC 0x0010U
#endif

Result<int> CreateInitMemfd() {
  // Kernels with vm.memfd_noexec want MFD_EXEC; older ones reject the flag.
  int fd = ::memfd_create("flashroll-init", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_EXEC);
  if (fd < 0 && errno == EINVAL) fd = ::memfd_create("flashroll-init", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Status::FromErrno(errno, "init binary: memfd_create");
  // The child rearranges descriptors 0-3 before executing this one: keep it above them.
  if (fd <= FR_INIT_CONTROL_FD) {
    const int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 10);
    const int err = errno;
    ::close(fd);
    if (moved < 0) return Status::FromErrno(err, "init binary: fcntl(F_DUPFD_CLOEXEC)");
    fd = moved;
  }
  const size_t size = static_cast<size_t>(flashroll_sandbox_init_end - flashroll_sandbox_init_begin);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, flashroll_sandbox_init_begin + done, size - done);
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      return Status::FromErrno(err, "init binary: write memfd");
    }
    done += static_cast<size_t>(n);
  }
  if (::fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) != 0) {
    const int err = errno;
    ::close(fd);
    return Status::FromErrno(err, "init binary: seal memfd");
  }
  return fd;
}

}  // namespace

Result<int> InitBinaryFd() {
  static const Result<int> fd = CreateInitMemfd();
  return fd;
}

ChildStatus ExecInitChild(int init_fd, int control_fd, const InitKeep& keep, const RlimitPlan& rlimits) {
  // A kept sandbox's descriptors out of the way of 3, 4 and 5 first: each
  // of those numbers may hold one of them (or the control socket).
  int listen_fd = -1, range_lock_fd = -1;
  if (keep.listen_fd >= 0) {
    listen_fd = ::fcntl(keep.listen_fd, F_DUPFD_CLOEXEC, FR_INIT_RANGE_LOCK_FD + 1);
    range_lock_fd = ::fcntl(keep.range_lock_fd, F_DUPFD_CLOEXEC, FR_INIT_RANGE_LOCK_FD + 1);
    if (listen_fd < 0 || range_lock_fd < 0) return ChildStatus::Errno("init", "fcntl(F_DUPFD)", "keep");
  }
  const int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd < 0) return ChildStatus::Errno("init", "open", "/dev/null");
  for (int fd = 0; fd < 3; ++fd) {
    if (::dup3(null_fd, fd, 0) < 0) return ChildStatus::Errno("init", "dup3", "/dev/null");
  }
  if (control_fd == FR_INIT_CONTROL_FD) {
    if (::fcntl(control_fd, F_SETFD, 0) != 0) return ChildStatus::Errno("init", "fcntl(F_SETFD)", "control");
  } else if (::dup3(control_fd, FR_INIT_CONTROL_FD, 0) < 0) {
    return ChildStatus::Errno("init", "dup3", "control");
  }
  int last = FR_INIT_CONTROL_FD;
  char keep_arg[48] = "";
  if (listen_fd >= 0) {
    if (::dup3(listen_fd, FR_INIT_LISTEN_FD, 0) < 0) return ChildStatus::Errno("init", "dup3", "listen");
    if (::dup3(range_lock_fd, FR_INIT_RANGE_LOCK_FD, 0) < 0) {
      return ChildStatus::Errno("init", "dup3", "range lock");
    }
    last = FR_INIT_RANGE_LOCK_FD;
    std::snprintf(keep_arg, sizeof(keep_arg), "%lld:%lld", static_cast<long long>(keep.orphan_ms),
                  static_cast<long long>(keep.expires_ms));
  }
  // Everything the manager had open stays behind.
  if (::syscall(SYS_close_range, last + 1, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
    return ChildStatus::Errno("init", "close_range(CLOSE_RANGE_CLOEXEC)", nullptr);
  }
  const ChildStatus limited = OpenFilesLimitChild(rlimits);
  if (!limited.ok()) return limited;
  char arg0[] = "flashroll-init";
  char* const argv[] = {arg0, listen_fd >= 0 ? keep_arg : nullptr, nullptr};
  char* const envp[] = {nullptr};
  ::syscall(SYS_execveat, init_fd, "", argv, envp, AT_EMPTY_PATH);
  return ChildStatus::Errno("init", "execveat", "flashroll-init");
}

}  // namespace flashroll::sandbox
