#include "sandbox/caps.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>

namespace flashroll::sandbox {

Result<CapsPlan> PrepareCapsParentSide() {
  const int fd = ::open("/proc/sys/kernel/cap_last_cap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "open /proc/sys/kernel/cap_last_cap");
  char buf[16] = {};
  const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0) return Status::IoError("read /proc/sys/kernel/cap_last_cap: empty");
  CapsPlan plan;
  plan.last_cap = std::atoi(buf);
  if (plan.last_cap < 30 || plan.last_cap > 63) {
    return Status::IoError("/proc/sys/kernel/cap_last_cap: implausible value " + std::string(buf));
  }
  return plan;
}

ChildStatus CapsChild(const CapsPlan& plan) {
  for (int cap = 0; cap <= plan.last_cap; ++cap) {
    if ((plan.keep >> cap & 1) != 0) continue;
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) return ChildStatus::Errno("caps", "prctl(PR_CAPBSET_DROP)", nullptr);
  }
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) {
    return ChildStatus::Errno("caps", "prctl(PR_CAP_AMBIENT_CLEAR_ALL)", nullptr);
  }
  struct __user_cap_header_struct header {};
  header.version = _LINUX_CAPABILITY_VERSION_3;
  struct __user_cap_data_struct data[2] = {};
  for (int word = 0; word < 2; ++word) {
    const auto bits = static_cast<uint32_t>(plan.keep >> (32 * word));
    data[word].effective = bits;
    data[word].permitted = bits;
  }
  if (::syscall(SYS_capset, &header, data) != 0) return ChildStatus::Errno("caps", "capset", nullptr);
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return ChildStatus::Errno("caps", "prctl(PR_SET_NO_NEW_PRIVS)", nullptr);
  return ChildStatus::Ok();
}

}  // namespace flashroll::sandbox
