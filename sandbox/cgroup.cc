#include "sandbox/cgroup.h"

#include <linux/magic.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>

#include "sandbox/cgroup_backends.h"

namespace flashroll::sandbox {

namespace {

bool IsFilesystem(const char* path, long magic) {
  struct statfs st {};
  return ::statfs(path, &st) == 0 && static_cast<long>(st.f_type) == magic;
}

}  // namespace

void DrainOomNotifier(const Cgroup::OomNotifier& notifier) {
  char buf[512];
  if (notifier.events & EPOLLPRI) {
    // A v2 file: reading it from the start re-arms the notification.
    while (::pread(notifier.fd.get(), buf, sizeof(buf), 0) < 0 && errno == EINTR) {
    }
    return;
  }
  uint64_t count = 0;
  while (::read(notifier.fd.get(), &count, sizeof(count)) < 0 && errno == EINTR) {
  }
}

Result<std::unique_ptr<CgroupBackend>> OpenCgroupBackend() {
  if (::geteuid() != 0) return Status::PermissionDenied("cgroups: the sandbox manager must run as root");
  constexpr const char* kRoot = "/sys/fs/cgroup";
  if (IsFilesystem(kRoot, CGROUP2_SUPER_MAGIC)) return OpenUnifiedCgroupBackend(kRoot);
  if (IsFilesystem("/sys/fs/cgroup/unified", CGROUP2_SUPER_MAGIC) &&
      IsFilesystem("/sys/fs/cgroup/memory", CGROUP_SUPER_MAGIC)) {
    return OpenHybridCgroupBackend(kRoot, "/sys/fs/cgroup/unified");
  }
  return Status::FailedPrecondition(
      "cgroups: neither a cgroup v2 mount at /sys/fs/cgroup nor the hybrid layout "
      "(v1 controllers plus /sys/fs/cgroup/unified); sandboxes need cgroup v2 to be killed and frozen");
}

ChildStatus CgroupNamespaceChild() {
  if (::unshare(CLONE_NEWCGROUP) != 0) return ChildStatus::Errno("cgroup", "unshare(CLONE_NEWCGROUP)", nullptr);
  return ChildStatus::Ok();
}

}  // namespace flashroll::sandbox
