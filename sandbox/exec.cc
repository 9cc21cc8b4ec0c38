#include "sandbox/exec.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "sandbox/init_protocol.h"
#include "sandbox/unique_fd.h"

namespace flashroll::sandbox {

namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kKillGrace = std::chrono::seconds(2);

Status SendExec(int control_fd, uint32_t exec_id, const ExecRequest& request,
                const std::vector<std::string>& env, const int fds[3]) {
  std::string payload;
  auto add = [&payload](const std::string& s) -> Status {
    if (s.find('\0') != std::string::npos) return Status::InvalidArgument("exec: argument or variable contains NUL");
    payload.append(s);
    payload.push_back('\0');
    return Status::Ok();
  };
  for (const auto& arg : request.argv) FR_RETURN_IF_ERROR(add(arg));
  for (const auto& var : env) FR_RETURN_IF_ERROR(add(var));
  FR_RETURN_IF_ERROR(add(request.cwd.empty() ? "/" : request.cwd));
  FR_RETURN_IF_ERROR(add(request.user));
  FR_RETURN_IF_ERROR(add(request.group));
  if (payload.size() + sizeof(fr_init_header) > FR_INIT_MAX_MESSAGE) {
    return Status::InvalidArgument("exec: command line and environment exceed " +
                                   std::to_string(FR_INIT_MAX_MESSAGE) + " bytes");
  }
  fr_init_header header {};
  header.type = FR_INIT_EXEC;
  header.exec_id = exec_id;
  header.argc = static_cast<uint32_t>(request.argv.size());
  header.envc = static_cast<uint32_t>(env.size());
  header.payload_len = static_cast<uint32_t>(payload.size());
  iovec iov[2] = {{&header, sizeof(header)}, {payload.data(), payload.size()}};
  union {
    cmsghdr align;
    char space[CMSG_SPACE(sizeof(int) * 3)];
  } control {};
  msghdr msg {};
  msg.msg_iov = iov;
  msg.msg_iovlen = 2;
  msg.msg_control = control.space;
  msg.msg_controllen = sizeof(control.space);
  cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(sizeof(int) * 3);
  std::memcpy(CMSG_DATA(cmsg), fds, sizeof(int) * 3);
  if (::sendmsg(control_fd, &msg, MSG_NOSIGNAL) < 0) {
    if (errno == EPIPE || errno == ECONNRESET) return Status::Unavailable("exec: the sandbox's init has exited");
    return Status::FromErrno(errno, "exec: sendmsg to init");
  }
  return Status::Ok();
}

// Reads what is available from `fd` into `out` (up to `limit`, the rest is
// dropped). Returns false at end of file or on error.
bool Pump(int fd, std::string* out, size_t limit, bool* truncated) {
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n > 0) {
      const size_t room = out->size() < limit ? limit - out->size() : 0;
      const size_t take = std::min(room, static_cast<size_t>(n));
      out->append(buf, take);
      if (take < static_cast<size_t>(n)) *truncated = true;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && errno == EAGAIN;
  }
}

// Publishes the running exec's id for SignalExec, and withdraws it on every
// way out of RunInInit.
class RunningExec {
 public:
  explicit RunningExec(std::atomic<uint32_t>* running) : running_(running) {}
  ~RunningExec() { running_->store(0); }
  RunningExec(const RunningExec&) = delete;
  RunningExec& operator=(const RunningExec&) = delete;
  void Publish(uint32_t exec_id) { running_->store(exec_id); }

 private:
  std::atomic<uint32_t>* running_;
};

}  // namespace

Status SignalExec(int control_fd, uint32_t exec_id, int sig) {
  fr_init_header header {};
  header.type = FR_INIT_SIGNAL;
  header.exec_id = exec_id;
  header.value = sig;
  if (::send(control_fd, &header, sizeof(header), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
    if (errno == EPIPE || errno == ECONNRESET) return Status::Unavailable("signal: the sandbox's init has exited");
    if (errno == EAGAIN) return Status::Unavailable("signal: the sandbox's init is not reading its control socket");
    return Status::FromErrno(errno, "signal: send to init");
  }
  return Status::Ok();
}

Result<ExecResult> RunInInit(int control_fd, uint32_t exec_id, const ExecRequest& request,
                             const std::vector<std::string>& default_env, std::atomic<uint32_t>* running) {
  if (request.argv.empty() || request.argv[0].empty()) return Status::InvalidArgument("exec: empty command");
  const auto start = Clock::now();
  const bool passthrough = request.stdin_fd >= 0 && request.stdout_fd >= 0 && request.stderr_fd >= 0;
  UniqueFd null_in, out_read, out_write, err_read, err_write;
  int fds[3] = {request.stdin_fd, request.stdout_fd, request.stderr_fd};
  if (!passthrough) {
    null_in.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!null_in.valid()) return Status::FromErrno(errno, "exec: open /dev/null");
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return Status::FromErrno(errno, "exec: pipe2");
    out_read.reset(p[0]);
    out_write.reset(p[1]);
    if (::pipe2(p, O_CLOEXEC) != 0) return Status::FromErrno(errno, "exec: pipe2");
    err_read.reset(p[0]);
    err_write.reset(p[1]);
    ::fcntl(out_read.get(), F_SETFL, O_NONBLOCK);
    ::fcntl(err_read.get(), F_SETFL, O_NONBLOCK);
    fds[0] = null_in.get();
    fds[1] = out_write.get();
    fds[2] = err_write.get();
  }
  RunningExec published(running);
  FR_RETURN_IF_ERROR(SendExec(control_fd, exec_id, request, request.env.empty() ? default_env : request.env, fds));
  published.Publish(exec_id);
  // The init holds its own copies now; ours would keep the pipes from reaching EOF.
  null_in.reset();
  out_write.reset();
  err_write.reset();

  ExecResult result;
  const auto deadline =
      request.timeout.count() > 0 ? start + request.timeout : Clock::time_point::max();
  Clock::time_point kill_deadline = Clock::time_point::max();
  bool exited = false;
  int wait_status = 0;
  int cancel_fd = request.cancel_fd;
  auto kill_command = [&]() -> Status {
    kill_deadline = Clock::now() + kKillGrace;
    return SignalExec(control_fd, exec_id, SIGKILL);
  };

  while (!exited) {
    const auto now = Clock::now();
    if (now >= kill_deadline) {
      return Status::DeadlineExceeded("exec " + request.argv[0] + ": did not exit within 2 s of SIGKILL");
    }
    if (now >= deadline && !result.timed_out && !result.cancelled) {
      result.timed_out = true;
      FR_RETURN_IF_ERROR(kill_command());
    }
    const auto until = std::min(result.timed_out || result.cancelled ? kill_deadline : deadline, kill_deadline);
    int wait_ms = -1;
    if (until != Clock::time_point::max()) {
      wait_ms = static_cast<int>(
          std::chrono::ceil<std::chrono::milliseconds>(until - now).count());
    }
    pollfd p[4] = {{control_fd, POLLIN, 0}, {out_read.get(), POLLIN, 0}, {err_read.get(), POLLIN, 0},
                   {cancel_fd, POLLIN, 0}};
    if (::poll(p, 4, wait_ms) < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "exec: poll");
    }
    if (p[1].revents != 0 && !Pump(out_read.get(), &result.stdout_data, request.max_output_bytes, &result.output_truncated)) {
      out_read.reset();
    }
    if (p[2].revents != 0 && !Pump(err_read.get(), &result.stderr_data, request.max_output_bytes, &result.output_truncated)) {
      err_read.reset();
    }
    if (p[3].revents != 0) {
      result.cancelled = true;
      cancel_fd = -1;
      FR_RETURN_IF_ERROR(kill_command());
    }
    if (p[0].revents != 0) {
      fr_init_header header {};
      const ssize_t n = ::recv(control_fd, &header, sizeof(header), MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) return Status::Unavailable("exec " + request.argv[0] + ": the sandbox's init has exited");
      if (n != static_cast<ssize_t>(sizeof(header)) || header.exec_id != exec_id) continue;  // stale or malformed
      if (header.type == FR_INIT_STARTED && header.value2 != 0) {
        result.start_errno = header.value2;
        result.duration_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
        if (header.reserved == FR_INIT_STAGE_CREDENTIALS) {
          // The init has written why (the user, the group) to the command's stderr.
          result.exit_code = 126;
          if (err_read.valid()) Pump(err_read.get(), &result.stderr_data, request.max_output_bytes, &result.output_truncated);
          return result;
        }
        result.exit_code = header.value2 == ENOENT ? 127 : 126;
        const std::string message =
            "flashroll: " + request.argv[0] + ": " + std::strerror(header.value2) + "\n";
        if (passthrough) {
          (void)!::write(request.stderr_fd, message.data(), message.size());
        } else {
          result.stderr_data = message;
        }
        return result;
      }
      if (header.type == FR_INIT_EXITED) {
        exited = true;
        wait_status = header.value;
      }
    }
  }
  // Whatever the command wrote before exiting is in the pipes already.
  if (out_read.valid()) Pump(out_read.get(), &result.stdout_data, request.max_output_bytes, &result.output_truncated);
  if (err_read.valid()) Pump(err_read.get(), &result.stderr_data, request.max_output_bytes, &result.output_truncated);
  if (WIFSIGNALED(wait_status)) {
    result.signal = WTERMSIG(wait_status);
    result.exit_code = 128 + result.signal;
  } else {
    result.exit_code = WEXITSTATUS(wait_status);
  }
  result.duration_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  return result;
}

}  // namespace flashroll::sandbox
