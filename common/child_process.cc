#include "common/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

extern char** environ;

namespace flashroll {
namespace {

int ExitStatus(int wstatus) {
  if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
  return 255;
}

}  // namespace

Result<std::unique_ptr<ChildProcess>> ChildProcess::Start(const ChildOptions& options) {
  if (options.argv.empty()) return Status::InvalidArgument("child process: empty argv");
  // Everything the child needs is built before fork: after it, only
  // async-signal-safe calls (the parent has other threads).
  std::vector<char*> argv;
  for (const std::string& a : options.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string key = entry.substr(0, entry.find('='));
    if (!options.env.count(key)) env_strings.push_back(entry);
  }
  for (const auto& [key, value] : options.env) env_strings.push_back(key + "=" + value);
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  int output = -1;
  if (!options.output_path.empty()) {
    output = ::open(options.output_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (output < 0) return Status::IoError("open " + options.output_path + ": " + std::strerror(errno));
  }
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) {
    const int err = errno;
    if (output >= 0) ::close(output);
    return Status::IoError(std::string("pipe2: ") + std::strerror(err));
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    if (output >= 0) ::close(output);
    ::close(report[0]);
    ::close(report[1]);
    return Status::IoError(std::string("fork: ") + std::strerror(err));
  }
  if (pid == 0) {
    ::setpgid(0, 0);  // its own process group, so Stop reaches what it starts too
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl
    if (output >= 0 && (::dup2(output, STDOUT_FILENO) < 0 || ::dup2(output, STDERR_FILENO) < 0)) ::_exit(127);
    if (!options.working_dir.empty() && ::chdir(options.working_dir.c_str()) != 0) {
      const int err = errno;
      (void)!::write(report[1], &err, sizeof(err));
      ::_exit(127);
    }
    ::execvpe(argv[0], argv.data(), envp.data());
    const int err = errno;
    (void)!::write(report[1], &err, sizeof(err));
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here, so the group exists before Start returns
  if (output >= 0) ::close(output);
  ::close(report[1]);
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(report[0], &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  ::close(report[0]);
  auto child = std::unique_ptr<ChildProcess>(new ChildProcess(pid));
  if (n == static_cast<ssize_t>(sizeof(child_errno))) {
    child->Wait();
    return Status::NotFound("exec " + options.argv[0] +
                            (options.working_dir.empty() ? "" : " in " + options.working_dir) + ": " +
                            std::strerror(child_errno));
  }
  return child;
}

ChildProcess::~ChildProcess() { Stop(); }

std::optional<int> ChildProcess::Wait(std::optional<std::chrono::milliseconds> timeout) {
  if (status_) return status_;
  const auto deadline = timeout ? std::chrono::steady_clock::now() + *timeout : std::chrono::steady_clock::time_point::max();
  while (true) {
    int wstatus = 0;
    const pid_t r = ::waitpid(pid_, &wstatus, timeout ? WNOHANG : 0);
    if (r == pid_) {
      status_ = ExitStatus(wstatus);
      return status_;
    }
    if (r < 0 && errno != EINTR) {
      status_ = 255;  // not our child any more (reaped elsewhere): nothing to wait for
      return status_;
    }
    if (timeout && std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    if (timeout) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

int ChildProcess::Stop(std::chrono::milliseconds grace) {
  if (status_) return *status_;
  // The whole group: a shell's children (or a trainer's workers) too.
  ::kill(-pid_, SIGTERM);
  if (auto s = Wait(grace)) {
    ::kill(-pid_, SIGKILL);  // what outlived the leader
    return *s;
  }
  ::kill(-pid_, SIGKILL);
  return *Wait();
}

}  // namespace flashroll
