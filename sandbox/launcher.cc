#include "sandbox/launcher.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "sandbox/child_status.h"

namespace flashroll::sandbox {

namespace {

// The child remaps descriptors 0-3; its own ends must sit above them.
Result<UniqueFd> AboveStdio(int fd) {
  if (fd > 3) return UniqueFd(fd);
  const int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 10);
  const int err = errno;
  ::close(fd);
  if (moved < 0) return Status::FromErrno(err, "launch: fcntl(F_DUPFD_CLOEXEC)");
  return UniqueFd(moved);
}

Status SocketPair(UniqueFd* parent, UniqueFd* child, const char* what) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0) {
    return Status::FromErrno(errno, std::string("launch: socketpair(") + what + ")");
  }
  parent->reset(fds[0]);
  FR_ASSIGN_OR_RETURN(*child, AboveStdio(fds[1]));
  return Status::Ok();
}

[[noreturn]] void ChildMain(const ContainPlan& plan, int sync_fd, int control_fd) {
  const ChildStatus status = ContainChild(plan, sync_fd, control_fd);
  ChildStatusMessage message;
  EncodeChildStatus(status, &message);
  (void)!::write(sync_fd, &message, sizeof(message));
  ::_exit(1);
}

}  // namespace

Status KillAndReapInit(InitProcess& init, std::chrono::milliseconds timeout) {
  if (!init.pidfd.valid()) return Status::Ok();
  if (::syscall(SYS_pidfd_send_signal, init.pidfd.get(), SIGKILL, nullptr, 0) != 0 && errno != ESRCH) {
    return Status::FromErrno(errno, "pidfd_send_signal(init " + std::to_string(init.pid) + ", SIGKILL)");
  }
  // A pidfd polls readable once its process has exited (and can be reaped).
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int wait_ms = -1;
    if (timeout.count() >= 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      wait_ms = static_cast<int>(std::max<int64_t>(0, left.count()));
    }
    pollfd pfd{init.pidfd.get(), POLLIN, 0};
    const int ready = ::poll(&pfd, 1, wait_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return Status::FromErrno(errno, "poll(pidfd of init " + std::to_string(init.pid) + ")");
    if (ready == 0) {
      return Status::DeadlineExceeded("init " + std::to_string(init.pid) + " not reaped " +
                                      std::to_string(timeout.count()) +
                                      " ms after SIGKILL: a process of its sandbox does not die (uninterruptible "
                                      "sleep?)");
    }
    break;
  }
  siginfo_t info {};
  for (;;) {
    if (::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(init.pidfd.get()), &info, WEXITED) == 0) break;
    if (errno == EINTR) continue;
    if (errno == ECHILD) break;  // already reaped
    return Status::FromErrno(errno, "waitid(init " + std::to_string(init.pid) + ")");
  }
  init.pidfd.reset();
  return Status::Ok();
}

Result<InitProcess> LaunchInit(const ContainPlan& plan, Cgroup& cgroup,
                               const std::function<Status(pid_t)>& before_go) {
  UniqueFd sync_parent, sync_child, control_parent, control_child;
  FR_RETURN_IF_ERROR(SocketPair(&sync_parent, &sync_child, "handshake"));
  FR_RETURN_IF_ERROR(SocketPair(&control_parent, &control_child, "control"));

  int pidfd = -1;
  struct clone_args args {};
  args.flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_PIDFD;
  if (plan.netns_fd < 0) args.flags |= CLONE_NEWNET;  // else the child joins a pooled one
  const bool rootless = plan.userns == UsernsMode::kRootless;
  if (rootless) args.flags |= CLONE_NEWUSER;
  if (cgroup.clone_into_fd() >= 0) {
    args.flags |= CLONE_INTO_CGROUP;
    args.cgroup = static_cast<uint64_t>(cgroup.clone_into_fd());
  }
  args.pidfd = reinterpret_cast<uint64_t>(&pidfd);
  args.exit_signal = SIGCHLD;
  const long pid = ::syscall(SYS_clone3, &args, sizeof(args));
  if (pid < 0) {
    return Status::FromErrno(errno, rootless
                                        ? "launch: clone3(NEWUSER|NEWNS|NEWPID|NEWNET|NEWUTS|NEWIPC)"
                                        : "launch: clone3(NEWNS|NEWPID|NEWNET|NEWUTS|NEWIPC|INTO_CGROUP)");
  }
  if (pid == 0) ChildMain(plan, sync_child.get(), control_child.get());

  InitProcess init;
  init.pid = static_cast<pid_t>(pid);
  init.pidfd.reset(pidfd);
  sync_child.reset();
  control_child.reset();

  auto fail = [&init](const Status& status) -> Result<InitProcess> {
    (void)KillAndReapInit(init);
    return status;
  };
  if (Status attached = cgroup.AttachParentSide(init.pid); !attached.ok()) return fail(attached.Wrap("launch"));
  if (rootless) {
    // Uid and gid 0 inside are the manager's own ids: the only mapping an
    // unprivileged process may write.
    const Status mapped = WriteIdMaps(init.pid, IdRange{::geteuid(), 1}, IdRange{::getegid(), 1}, Setgroups::kDeny);
    if (!mapped.ok()) return fail(mapped.Wrap("launch"));
  }
  if (before_go) {
    if (Status done = before_go(init.pid); !done.ok()) return fail(done.Wrap("launch"));
  }
  const char go = 'g';
  // EPIPE: the child failed before the handshake; its report is still queued.
  if (::send(sync_parent.get(), &go, 1, MSG_NOSIGNAL) != 1 && errno != EPIPE) {
    return fail(Status::FromErrno(errno, "launch: write handshake"));
  }

  ChildStatusMessage message {};
  ssize_t n;
  bool reset = false;
  do {
    n = ::read(sync_parent.get(), &message, sizeof(message));
    // A child that died with the go byte unread resets the socket; the
    // error is reported once, and its report is still queued behind it.
  } while (n < 0 && (errno == EINTR || (errno == ECONNRESET && !std::exchange(reset, true))));
  if (n < 0) return fail(Status::FromErrno(errno, "launch: read handshake"));
  if (n == static_cast<ssize_t>(sizeof(message))) {
    message.step[sizeof(message.step) - 1] = '\0';
    message.call[sizeof(message.call) - 1] = '\0';
    message.arg[sizeof(message.arg) - 1] = '\0';
    return fail(DecodeChildStatus(message).Wrap("sandbox set-up"));
  }
  if (n != 0) return fail(Status::Internal("launch: short handshake message"));
  // EOF: the socket closed on exec, or the child died without a word.
  siginfo_t info {};
  if (::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(init.pidfd.get()), &info,
               WEXITED | WNOHANG | WNOWAIT) == 0 &&
      info.si_pid != 0) {
    return fail(Status::Internal("launch: the sandbox child died during set-up (status " +
                                 std::to_string(info.si_status) + ")"));
  }
  init.control = std::move(control_parent);
  return init;
}

}  // namespace flashroll::sandbox
