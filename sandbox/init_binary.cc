#include "sandbox/init_binary.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

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

ChildStatus ExecInitChild(int init_fd, int control_fd) {
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
  // Everything the manager had open stays behind.
  if (::syscall(SYS_close_range, FR_INIT_CONTROL_FD + 1, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
    return ChildStatus::Errno("init", "close_range(CLOSE_RANGE_CLOEXEC)", nullptr);
  }
  char arg0[] = "flashroll-init";
  char* const argv[] = {arg0, nullptr};
  char* const envp[] = {nullptr};
  ::syscall(SYS_execveat, init_fd, "", argv, envp, AT_EMPTY_PATH);
  return ChildStatus::Errno("init", "execveat", "flashroll-init");
}

}  // namespace flashroll::sandbox
