#include "sandbox/api/stream_exec.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "sandbox/unique_fd.h"

namespace flashroll::sandbox::api {

ExecRequest BufferedRequest(const ExecCall& call) {
  ExecRequest request;
  request.argv = call.argv;
  request.env = call.env;
  request.cwd = call.cwd;
  request.user = call.user;
  request.group = call.group;
  request.timeout = call.timeout;
  request.max_output_bytes = call.max_output_bytes;
  return request;
}

Result<ExecResult> StreamExec(Manager& manager, const std::string& id, const ExecCall& call,
                              const std::function<bool(OutputStream, std::string_view)>& on_output) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return Status::FromErrno(errno, "stream exec: pipe2");
  UniqueFd out_read(out[0]), out_write(out[1]);
  if (::pipe2(err, O_CLOEXEC) != 0) return Status::FromErrno(errno, "stream exec: pipe2");
  UniqueFd err_read(err[0]), err_write(err[1]);
  UniqueFd null_fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!null_fd.valid()) return Status::FromErrno(errno, "stream exec: open /dev/null");
  UniqueFd cancel(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!cancel.valid()) return Status::FromErrno(errno, "stream exec: eventfd");

  ExecRequest request = BufferedRequest(call);
  request.stdin_fd = null_fd.get();
  request.stdout_fd = out_write.get();
  request.stderr_fd = err_write.get();
  request.cancel_fd = cancel.get();

  Result<ExecResult> result = Status::Internal("stream exec: no result");
  std::atomic<bool> done{false};
  std::thread runner([&] {
    result = manager.Exec(id, request);
    // Our write ends go away with the exec, so the readers see EOF once the
    // command's own copies are closed.
    out_write.reset();
    err_write.reset();
    done = true;
  });

  bool reader_gone = false;
  bool open[2] = {true, true};
  const int fds[2] = {out_read.get(), err_read.get()};
  char buffer[16384];
  // After the exec returns, leftovers are drained without waiting: a
  // background process of the sandbox may hold the pipe open for ever.
  while (open[0] || open[1]) {
    const bool finished = done.load();
    pollfd pfds[2];
    nfds_t n = 0;
    int which[2];
    for (int i = 0; i < 2; ++i) {
      if (!open[i]) continue;
      pfds[n] = {fds[i], POLLIN, 0};
      which[n++] = i;
    }
    const int ready = ::poll(pfds, n, finished ? 0 : 20);
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) {
      if (finished) break;
      continue;
    }
    for (nfds_t k = 0; k < n; ++k) {
      if ((pfds[k].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const ssize_t got = ::read(pfds[k].fd, buffer, sizeof(buffer));
      if (got <= 0) {
        if (got < 0 && errno == EINTR) continue;
        open[which[k]] = false;
        continue;
      }
      if (reader_gone) continue;
      const OutputStream stream = which[k] == 0 ? OutputStream::kStdout : OutputStream::kStderr;
      if (!on_output(stream, std::string_view(buffer, static_cast<size_t>(got)))) {
        reader_gone = true;
        const uint64_t one = 1;
        // One write cannot overflow the eventfd, so it cannot fail.
        const ssize_t written = ::write(cancel.get(), &one, sizeof(one));
        (void)written;
      }
    }
  }
  runner.join();
  return result;
}

}  // namespace flashroll::sandbox::api
