#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tasks/workspace.h"

namespace flashroll {
namespace {

// Output beyond this is dropped: a runaway `yes` must not exhaust memory.
constexpr size_t kMaxOutputBytes = 1 << 20;

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { Reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

}  // namespace

Result<std::unique_ptr<LocalWorkspace>> LocalWorkspace::Create() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/flashroll-ws-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) return Status::FromErrno(errno, "mkdtemp " + pattern);
  return std::unique_ptr<LocalWorkspace>(new LocalWorkspace(pattern));
}

LocalWorkspace::~LocalWorkspace() {
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

Result<std::unique_ptr<Workspace>> LocalWorkspace::ForVerification() {
  FR_ASSIGN_OR_RETURN(std::unique_ptr<LocalWorkspace> copy, Create());
  std::error_code ec;
  std::filesystem::copy(dir_, copy->dir_,
                        std::filesystem::copy_options::recursive | std::filesystem::copy_options::copy_symlinks, ec);
  if (ec) return Status::IoError("copy " + dir_ + " to " + copy->dir_ + ": " + ec.message());
  return std::unique_ptr<Workspace>(std::move(copy));
}

Result<std::string> LocalWorkspace::Resolve(const std::string& path) const {
  FR_RETURN_IF_ERROR(CheckWorkspacePath(path));
  return dir_ + "/" + path;
}

Status LocalWorkspace::WriteFile(const std::string& path, const std::string& contents) {
  FR_ASSIGN_OR_RETURN(std::string full, Resolve(path));
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(full).parent_path(), ec);
  if (ec) return Status::IoError("mkdir for " + path + ": " + ec.message());
  std::ofstream out(full, std::ios::binary | std::ios::trunc);
  out << contents;
  out.close();
  if (!out) return Status::IoError("write " + full);
  return Status::Ok();
}

Result<std::string> LocalWorkspace::ReadFile(const std::string& path) {
  FR_ASSIGN_OR_RETURN(std::string full, Resolve(path));
  std::ifstream in(full, std::ios::binary);
  if (!in) return Status::NotFound("read " + path + ": no such file in the workspace");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

Result<ExecResult> LocalWorkspace::Exec(const std::string& command, std::chrono::milliseconds timeout) {
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return Status::FromErrno(errno, "pipe2");
  Fd out_read(out_pipe[0]), out_write(out_pipe[1]);
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) return Status::FromErrno(errno, "pipe2");
  Fd err_read(err_pipe[0]), err_write(err_pipe[1]);

  const pid_t pid = ::fork();
  if (pid < 0) return Status::FromErrno(errno, "fork");
  if (pid == 0) {
    // Child: its own process group so a timeout kills everything it started.
    ::setpgid(0, 0);
    ::dup2(out_write.get(), STDOUT_FILENO);
    ::dup2(err_write.get(), STDERR_FILENO);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
    if (::chdir(dir_.c_str()) != 0) ::_exit(126);
    ::execl("/bin/bash", "bash", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  out_write.Reset();
  err_write.Reset();

  ExecResult result;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  pollfd fds[2] = {{out_read.get(), POLLIN, 0}, {err_read.get(), POLLIN, 0}};
  int open_streams = 2;
  char buf[8192];
  while (open_streams > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      result.timed_out = true;
      break;
    }
    int ready = ::poll(fds, 2, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      ssize_t n = ::read(fds[i].fd, buf, sizeof(buf));
      if (n <= 0) {
        fds[i].fd = -1;
        --open_streams;
        continue;
      }
      std::string& sink = i == 0 ? result.stdout_text : result.stderr_text;
      if (sink.size() < kMaxOutputBytes) sink.append(buf, std::min(static_cast<size_t>(n), kMaxOutputBytes - sink.size()));
    }
  }
  if (result.timed_out) ::kill(-pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  // Background children that outlive the shell would keep the group alive.
  ::kill(-pid, SIGKILL);
  if (result.timed_out) result.exit_code = 124;
  else if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) result.exit_code = 128 + WTERMSIG(status);
  return result;
}

}  // namespace flashroll
