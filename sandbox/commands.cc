// `flashroll sandbox run`: flags into a SandboxSpec, then create, exec with
// the terminal's stdio passed through, destroy. Exit codes: the command's
// own; 124 on timeout; 137 when the sandbox was OOM-killed; 2 for bad input
// (including --net policy, not built yet); 1 when the sandbox failed.
#include "sandbox/commands.h"

#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "common/config.h"
#include "common/flags.h"
#include "sandbox/sandbox.h"
#include "sandbox/unique_fd.h"

namespace flashroll {

namespace {

using sandbox::SandboxSpec;

int RunCommand(const std::vector<std::string>& args) {
  std::string image = "host", net = "none", memory, timeout, cpuset;
  std::vector<std::string> allow, rw, command;
  int64_t pids = 0;
  double cpus = 0;
  FlagParser flags("flashroll sandbox run [flags] -- CMD ARGS...",
                   "Runs CMD in a fresh sandbox with stdin, stdout and stderr passed through, and exits with its "
                   "exit code (124 on timeout, 137 when killed for memory). Nothing is left behind.");
  flags.String("--image", &image, "host, busybox or a directory used as the read-only root (default host)");
  flags.String("--net", &net, "none (loopback only) or policy (egress allow rules)");
  flags.List("--allow", &allow, "IP[/N]:PORT egress allowed with --net policy (repeatable)");
  flags.String("--memory", &memory, "memory limit, e.g. 256M");
  flags.Int("--pids", &pids, "maximum number of processes");
  flags.Double("--cpus", &cpus, "CPU quota in CPUs, e.g. 0.5");
  flags.String("--cpuset", &cpuset, "CPUs the sandbox may run on, e.g. 0-1");
  flags.String("--timeout", &timeout, "kill the command after this long, e.g. 10s (exit 124)");
  flags.List("--rw", &rw, "host path bound read-write at the same path (repeatable)");
  flags.Positional("CMD", &command, "the command and its arguments");
  if (auto exit = flags.ParseOrExit(args)) return *exit;
  if (command.empty()) return ReportFailure(Status::InvalidArgument("sandbox run: missing CMD (see --help)"));

  SandboxSpec spec;
  if (Status s = sandbox::ParseImage(image, &spec); !s.ok()) return ReportFailure(s.Wrap("--image"));
  auto net_mode = sandbox::ParseNetMode(net);
  if (!net_mode.ok()) return ReportFailure(net_mode.status().Wrap("--net"));
  spec.net = *net_mode;
  for (const auto& rule : allow) {
    auto parsed = sandbox::ParseAllowRule(rule);
    if (!parsed.ok()) return ReportFailure(parsed.status().Wrap("--allow"));
    spec.allow.push_back(*parsed);
  }
  if (spec.net == sandbox::NetMode::kPolicy) {
    return ReportFailure(Status::InvalidArgument("--net policy: not built yet"));
  }
  if (!memory.empty()) {
    auto bytes = ParseByteSize(memory);
    if (!bytes.ok()) return ReportFailure(bytes.status().Wrap("--memory"));
    spec.memory_bytes = *bytes;
  }
  spec.pids = pids;
  spec.cpus = cpus;
  spec.cpuset = cpuset;
  spec.rw_paths = rw;
  sandbox::ExecRequest request;
  request.argv = command;
  if (!timeout.empty()) {
    auto ms = ParseDuration(timeout);
    if (!ms.ok()) return ReportFailure(ms.status().Wrap("--timeout"));
    request.timeout = *ms;
  }
  if (Status s = sandbox::ValidateSpec(spec); !s.ok()) return ReportFailure(s);

  // Ctrl-C and kill end the sandbox cleanly instead of leaving it to reclaim.
  sigset_t stop;
  sigemptyset(&stop);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stop, sig);
  sigprocmask(SIG_BLOCK, &stop, nullptr);
  sandbox::UniqueFd stop_fd(::signalfd(-1, &stop, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!stop_fd.valid()) return ReportFailure(Status::FromErrno(errno, "sandbox run: signalfd"));

  auto manager = sandbox::Manager::Open();
  if (!manager.ok()) return ReportFailure(manager.status().Wrap("sandbox run"));
  auto id = (*manager)->Create(spec);
  if (!id.ok()) return ReportFailure(id.status().Wrap("sandbox run"));
  request.stdin_fd = STDIN_FILENO;
  request.stdout_fd = STDOUT_FILENO;
  request.stderr_fd = STDERR_FILENO;
  request.cancel_fd = stop_fd.get();
  auto result = (*manager)->Exec(*id, request);
  const Status destroyed = (*manager)->Destroy(*id);
  if (!result.ok()) return ReportFailure(result.status().Wrap("sandbox run"));
  if (!destroyed.ok()) return ReportFailure(destroyed.Wrap("sandbox run"));
  if (result->timed_out) return 124;
  if (result->oom_killed) return 137;
  if (result->cancelled) {
    signalfd_siginfo info {};
    if (::read(stop_fd.get(), &info, sizeof(info)) == sizeof(info)) return 128 + static_cast<int>(info.ssi_signo);
    return 130;
  }
  return result->exit_code;
}

}  // namespace

void RegisterSandboxCommands(Registry& registry) {
  registry.AddCommand({"sandbox run", "run a command in a fresh isolated sandbox", RunCommand});
}

}  // namespace flashroll
