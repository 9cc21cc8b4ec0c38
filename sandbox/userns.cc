#include "sandbox/userns.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <utility>

namespace flashroll::sandbox {

namespace {

// The holder only has to exist while its maps are written and its
// namespace is opened. It shares the manager's memory (CLONE_VM: no copy of
// the page tables, whatever the manager's size), so it touches nothing and
// waits in the kernel until it is killed.
int HoldUserNamespace(void*) {
  for (;;) ::syscall(SYS_ppoll, nullptr, 0, nullptr, nullptr, 0);
  return 0;
}

// The holder process: SIGKILLed and reaped when this goes out of scope.
class Holder {
 public:
  Holder() = default;
  Holder(const Holder&) = delete;
  Holder& operator=(const Holder&) = delete;
  ~Holder() {
    if (!pidfd_.valid()) return;
    ::syscall(SYS_pidfd_send_signal, pidfd_.get(), SIGKILL, nullptr, 0);
    siginfo_t info {};
    while (::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd_.get()), &info, WEXITED) != 0 &&
           errno == EINTR) {
    }
  }

  Status Start() {
    int pidfd = -1;
    const int flags = CLONE_NEWUSER | CLONE_VM | CLONE_PIDFD | SIGCHLD;
    const long pid = ::clone(HoldUserNamespace, stack_ + sizeof(stack_), flags, nullptr, &pidfd);
    if (pid < 0) return Status::FromErrno(errno, "userns: clone(CLONE_NEWUSER|CLONE_VM)");
    pid_ = static_cast<pid_t>(pid);
    pidfd_.reset(pidfd);
    return Status::Ok();
  }

  pid_t pid() const { return pid_; }

 private:
  // The holder's stack: it runs only the clone trampoline and one system call.
  alignas(16) char stack_[8192];
  pid_t pid_ = -1;
  UniqueFd pidfd_;
};

Status WriteProcFile(const std::string& path, const std::string& value) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno(errno, "open " + path);
  if (::write(fd.get(), value.data(), value.size()) != static_cast<ssize_t>(value.size())) {
    return Status::FromErrno(errno, "write '" + value + "' to " + path);
  }
  return Status::Ok();
}

}  // namespace

Status WriteIdMaps(pid_t pid, const IdRange& uids, const IdRange& gids, Setgroups setgroups) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/";
  // Before gid_map, the only time it may be written.
  FR_RETURN_IF_ERROR(WriteProcFile(dir + "setgroups", setgroups == Setgroups::kAllow ? "allow" : "deny"));
  FR_RETURN_IF_ERROR(
      WriteProcFile(dir + "uid_map", "0 " + std::to_string(uids.base) + " " + std::to_string(uids.count)));
  return WriteProcFile(dir + "gid_map", "0 " + std::to_string(gids.base) + " " + std::to_string(gids.count));
}

Result<UserNamespace> UserNamespace::Create(const IdRange& range) {
  Holder holder;
  FR_RETURN_IF_ERROR(holder.Start());
  FR_RETURN_IF_ERROR(WriteIdMaps(holder.pid(), range, range, Setgroups::kAllow).Wrap("userns"));
  UserNamespace userns;
  const std::string path = "/proc/" + std::to_string(holder.pid()) + "/ns/user";
  userns.fd_.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!userns.fd_.valid()) return Status::FromErrno(errno, "userns: open " + path);
  userns.range_ = range;
  return userns;
}

ChildStatus JoinUserNamespaceChild(int userns_fd) {
  if (userns_fd < 0) return ChildStatus::Ok();
  // Raw system calls: glibc's set*id wrappers would try to signal the
  // threads it believes this copy of the manager still has.
  if (::syscall(SYS_setgroups, 0, nullptr) != 0) return ChildStatus::Errno("userns", "setgroups", "none");
  if (::setns(userns_fd, CLONE_NEWUSER) != 0) return ChildStatus::Errno("userns", "setns(CLONE_NEWUSER)", nullptr);
  if (::syscall(SYS_setresgid, 0, 0, 0) != 0) return ChildStatus::Errno("userns", "setresgid", "0");
  if (::syscall(SYS_setresuid, 0, 0, 0) != 0) return ChildStatus::Errno("userns", "setresuid", "0");
  return ChildStatus::Ok();
}

}  // namespace flashroll::sandbox
