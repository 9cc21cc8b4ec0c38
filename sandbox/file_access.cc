#include "sandbox/file_access.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/openat2.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace flashroll::sandbox {

namespace {

using Clock = std::chrono::steady_clock;

// What the helper tells the manager when it is done: one write on a pipe,
// below PIPE_BUF, so it arrives whole.
struct HelperReport {
  enum Outcome : int32_t { kOk, kFailed, kNotRegular, kTooLarge };
  int32_t outcome = kOk;
  int32_t err = 0;    // kFailed: the errno
  uint32_t mode = 0;  // kNotRegular: st_mode
  char call[24] = {};  // kFailed: the failed call
};

HelperReport Failed(const char* call) {
  HelperReport report;
  report.outcome = HelperReport::kFailed;
  report.err = errno;
  for (size_t i = 0; call[i] != '\0' && i + 1 < sizeof(report.call); ++i) report.call[i] = call[i];
  return report;
}

HelperReport NotRegular(mode_t mode) {
  HelperReport report;
  report.outcome = HelperReport::kNotRegular;
  report.mode = mode;
  return report;
}

// Everything the helper needs, prepared by the parent: the helper is a copy
// of a multithreaded process, where malloc may deadlock (child_status.h),
// so it makes raw system calls on this data only.
struct HelperPlan {
  int pidfd = -1;
  int root = -1;
  int report_fd = -1;
  int data_fd = -1;  // reads: where the contents go; -1 for writes
  int keep[4] = {};  // the four above, sorted: every other descriptor is closed
  int ns_flags = 0;      // joined first
  bool join_user_last = false;  // kMapped: the user namespace after the others
  bool become_root = false;     // setresuid/setresgid(0) in the joined user namespace
  const char* relative_path = nullptr;  // beneath the root; "." for "/"
  bool write = false;
  std::string_view data;  // writes
  mode_t mode = 0;        // writes
  size_t max_bytes = 0;   // reads
};

int OpenInRoot(const HelperPlan& plan, uint64_t flags, mode_t mode) {
  open_how how {};
  how.flags = flags | O_NOFOLLOW | O_CLOEXEC;
  how.mode = mode;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  return static_cast<int>(::syscall(SYS_openat2, plan.root, plan.relative_path, &how, sizeof(how)));
}

bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// The helper's work, in order; the first failure is the report.
HelperReport RunHelper(const HelperPlan& plan) {
  // Copies of the manager's descriptors would stay open as long as the
  // helper runs: a concurrent exec's output pipe would not reach EOF, a
  // concurrent launch's handshake socket would not close.
  unsigned next = 0;
  for (int fd : plan.keep) {
    if (static_cast<unsigned>(fd) > next) ::syscall(SYS_close_range, next, static_cast<unsigned>(fd) - 1, 0);
    next = static_cast<unsigned>(fd) + 1;
  }
  ::syscall(SYS_close_range, next, ~0U, 0);
  // Raw set*id calls: glibc's wrappers would signal threads this copy of
  // the manager does not have. The host root's groups must not come along.
  if (plan.join_user_last && ::syscall(SYS_setgroups, 0, nullptr) != 0) return Failed("setgroups");
  if (::setns(plan.pidfd, plan.ns_flags) != 0) return Failed("setns");
  if (plan.join_user_last && ::setns(plan.pidfd, CLONE_NEWUSER) != 0) return Failed("setns(user)");
  if (plan.become_root) {
    if (::syscall(SYS_setresgid, 0, 0, 0) != 0) return Failed("setresgid");
    if (::syscall(SYS_setresuid, 0, 0, 0) != 0) return Failed("setresuid");
  }
  __user_cap_header_struct header {};
  header.version = _LINUX_CAPABILITY_VERSION_3;
  __user_cap_data_struct no_caps[2] = {};
  if (::syscall(SYS_capset, &header, no_caps) != 0) return Failed("capset");

  struct stat st {};
  UniqueFd look(OpenInRoot(plan, O_PATH, 0));
  if (look.valid()) {
    if (::fstat(look.get(), &st) != 0) return Failed("fstat");
    if (!S_ISREG(st.st_mode)) return NotRegular(st.st_mode);
  } else if (errno != ENOENT) {  // a write creates it; a read fails in the open below
    return Failed("open");
  }
  const uint64_t flags = (plan.write ? O_WRONLY | O_CREAT | O_TRUNC : O_RDONLY) | O_NONBLOCK | O_NOCTTY;
  UniqueFd fd(OpenInRoot(plan, flags, plan.write ? plan.mode : 0));
  if (!fd.valid()) return Failed("open");
  if (::fstat(fd.get(), &st) != 0) return Failed("fstat");
  if (!S_ISREG(st.st_mode)) return NotRegular(st.st_mode);

  if (plan.write) {
    if (!WriteAll(fd.get(), plan.data.data(), plan.data.size())) return Failed("write");
    return HelperReport();
  }
  char buf[65536];
  size_t total = 0;
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Failed("read");
    if (n == 0) return HelperReport();
    total += static_cast<size_t>(n);
    if (total > plan.max_bytes) {
      HelperReport report;
      report.outcome = HelperReport::kTooLarge;
      return report;
    }
    if (!WriteAll(plan.data_fd, buf, static_cast<size_t>(n))) return Failed("write to the manager");
  }
}

// The helper process: killed and reaped when this goes out of scope before
// it was reaped (a timeout, an error on the manager's side).
class Helper {
 public:
  explicit Helper(UniqueFd pidfd) : pidfd_(std::move(pidfd)) {}
  Helper(const Helper&) = delete;
  Helper& operator=(const Helper&) = delete;
  ~Helper() {
    if (!pidfd_.valid()) return;
    ::syscall(SYS_pidfd_send_signal, pidfd_.get(), SIGKILL, nullptr, 0);
    // Blocks only for as long as the kernel takes to end a killed process.
    Reap();
  }

  // Waits for the helper to exit (what it did is in its report).
  void Reap() {
    siginfo_t info {};
    while (::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd_.get()), &info, WEXITED) != 0 &&
           errno == EINTR) {
    }
    pidfd_.reset();
  }

 private:
  UniqueFd pidfd_;
};

// Waits until `fd` is readable or hung up, at most until `deadline`.
// Returns false on timeout.
Result<bool> WaitReadable(int fd, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p {fd, POLLIN, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left + 1, 60000)));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return Status::FromErrno(errno, "poll(file helper)");
  }
}

const char* TypeName(mode_t mode) {
  switch (mode & S_IFMT) {
    case S_IFIFO:
      return "a fifo";
    case S_IFCHR:
      return "a character device";
    case S_IFBLK:
      return "a block device";
    case S_IFSOCK:
      return "a socket";
    case S_IFDIR:
      return "a directory";
    case S_IFLNK:
      return "a symlink";
  }
  return "of unknown type";
}

Status StatusOf(const HelperReport& report, const std::string& path, size_t max_bytes) {
  switch (report.outcome) {
    case HelperReport::kOk:
      return Status::Ok();
    case HelperReport::kNotRegular:
      return Status::InvalidArgument("path " + path + ": " + TypeName(report.mode) + ", not a regular file");
    case HelperReport::kTooLarge:
      return Status::ResourceExhausted("path " + path + ": larger than " + std::to_string(max_bytes) + " bytes");
    case HelperReport::kFailed:
      break;
  }
  // Only setns can fail so: the init is gone.
  if (report.err == ESRCH) return Status::Unavailable("the sandbox's init has exited");
  if (report.err == ELOOP) {
    return Status::InvalidArgument("path " + path + ": a symlink loop or a /proc magic link on the way (" +
                                   std::strerror(ELOOP) + ")");
  }
  return Status::FromErrno(report.err, std::string(report.call, strnlen(report.call, sizeof(report.call))) + " " + path);
}

// Runs the helper for `plan` (its descriptors filled in here) and waits for
// it; a read's contents go to `out`.
Status RunFileHelper(const FileTarget& target, const std::string& path, HelperPlan plan,
                     std::chrono::milliseconds timeout, std::string* out) {
  if (path.empty() || path[0] != '/') return Status::InvalidArgument("path '" + path + "': must be absolute");
  if (path.find('\0') != std::string::npos) return Status::InvalidArgument("path " + path + ": contains NUL");
  const std::string relative = path.size() > 1 ? path.substr(1) : ".";
  plan.relative_path = relative.c_str();
  plan.pidfd = target.pidfd.get();
  plan.root = target.root.get();
  plan.ns_flags = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWNET | CLONE_NEWCGROUP;
  // Only a different user namespace can be joined (setns fails with EINVAL
  // on one's own). One that owns the others comes with them (setns joins it
  // first); one the host's owns them, joined first, would take away the
  // right to join the others.
  if (target.userns == UsernsMode::kRootless) plan.ns_flags |= CLONE_NEWUSER;
  plan.join_user_last = target.userns == UsernsMode::kMapped;
  plan.become_root = target.userns != UsernsMode::kNone;

  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::FromErrno(errno, "pipe2 (file helper report)");
  UniqueFd report_read(fds[0]), report_write(fds[1]);
  UniqueFd data_read, data_write;
  if (!plan.write) {
    if (::pipe2(fds, O_CLOEXEC) != 0) return Status::FromErrno(errno, "pipe2 (file helper data)");
    data_read.reset(fds[0]);
    data_write.reset(fds[1]);
  }
  plan.report_fd = report_write.get();
  plan.data_fd = data_write.get();
  // A read has no data_fd: keep the report's descriptor twice instead.
  const int keep[4] = {plan.pidfd, plan.root, plan.report_fd, plan.write ? plan.report_fd : plan.data_fd};
  std::copy(keep, keep + 4, plan.keep);
  std::sort(plan.keep, plan.keep + 4);

  int pidfd = -1;
  clone_args args {};
  // Signal handlers of the manager have no business running in the helper.
  args.flags = CLONE_PIDFD | CLONE_CLEAR_SIGHAND;
  args.pidfd = reinterpret_cast<uint64_t>(&pidfd);
  args.exit_signal = SIGCHLD;
  const long pid = ::syscall(SYS_clone3, &args, sizeof(args));
  if (pid < 0) return Status::FromErrno(errno, "clone3 (file helper)");
  if (pid == 0) {
    const HelperReport report = RunHelper(plan);
    (void)!::write(plan.report_fd, &report, sizeof(report));
    ::_exit(0);
  }
  Helper helper{UniqueFd(pidfd)};
  report_write.reset();
  data_write.reset();

  const auto deadline = Clock::now() + timeout;
  auto timed_out = [&] {
    return Status::DeadlineExceeded("path " + path + ": the file operation did not finish within " +
                                    std::to_string(timeout.count()) + " ms");
  };
  if (data_read.valid()) {
    char buf[65536];
    for (;;) {
      FR_ASSIGN_OR_RETURN(bool readable, WaitReadable(data_read.get(), deadline));
      if (!readable) return timed_out();
      const ssize_t n = ::read(data_read.get(), buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Status::FromErrno(errno, "read from the file helper");
      if (n == 0) break;
      out->append(buf, static_cast<size_t>(n));
    }
  }
  FR_ASSIGN_OR_RETURN(bool reported, WaitReadable(report_read.get(), deadline));
  if (!reported) return timed_out();
  HelperReport report;
  ssize_t n;
  do {
    n = ::read(report_read.get(), &report, sizeof(report));
  } while (n < 0 && errno == EINTR);
  helper.Reap();
  if (n != static_cast<ssize_t>(sizeof(report))) return Status::Internal("the file helper died without a report");
  return StatusOf(report, path, plan.max_bytes);
}

}  // namespace

Result<FileTarget> OpenFileTarget(pid_t init_pid, int init_pidfd, UsernsMode userns) {
  FileTarget target;
  target.userns = userns;
  target.pidfd.reset(::fcntl(init_pidfd, F_DUPFD_CLOEXEC, 0));
  if (!target.pidfd.valid()) return Status::FromErrno(errno, "dup the init's pidfd");
  const std::string root = "/proc/" + std::to_string(init_pid) + "/root";
  target.root.reset(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!target.root.valid()) return Status::FromErrno(errno, "open " + root);
  return target;
}

Result<std::string> ReadFileAsSandbox(const FileTarget& target, const std::string& path, size_t max_bytes,
                                      std::chrono::milliseconds timeout) {
  HelperPlan plan;
  plan.max_bytes = max_bytes;
  std::string out;
  FR_RETURN_IF_ERROR(RunFileHelper(target, path, plan, timeout, &out));
  return out;
}

Status WriteFileAsSandbox(const FileTarget& target, const std::string& path, std::string_view data, mode_t mode,
                          std::chrono::milliseconds timeout) {
  // A set-id file made here in an rw path is a set-id file on the host,
  // owned by the sandbox's ids, which the host's nosuid-free mounts honour.
  if ((mode & (S_ISUID | S_ISGID)) != 0) {
    char octal[8];
    std::snprintf(octal, sizeof(octal), "%04o", static_cast<unsigned>(mode & 07777));
    return Status::InvalidArgument("path " + path + ": mode " + octal +
                                   " has the set-uid or set-gid bit; the files API makes no set-id files");
  }
  HelperPlan plan;
  plan.write = true;
  plan.data = data;
  plan.mode = mode;
  return RunFileHelper(target, path, plan, timeout, nullptr);
}

}  // namespace flashroll::sandbox
