// `flashroll sandbox run`: flags into a SandboxSpec, then create, exec with
// the terminal's stdio passed through, destroy. Exit codes: the command's
// own; 124 on timeout; 137 when the sandbox was OOM-killed; 2 for bad input;
// 1 when the sandbox failed.
//
// `flashroll sandboxd`: the node agent (sandbox/api/server.h) until SIGINT
// or SIGTERM, then every sandbox it holds is destroyed. Its settings come
// from a `kind: sandboxd` config or the bare flags
// (sandbox/api/sandboxd_config.h).
//
// `flashroll image import`: an image into a node's store (image_store.h).
//
// `flashroll bench sandbox`: create + exec /bin/true + destroy latency and
// churn with the full isolation stack (the side-by-side comparison with
// crun, runc and bubblewrap is bench/sandbox_bench.cc).
#include "sandbox/commands.h"

#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "common/config.h"
#include "common/flags.h"
#include "common/http.h"
#include "common/log.h"
#include "sandbox/api/sandboxd_config.h"
#include "sandbox/api/server.h"
#include "sandbox/image_store.h"
#include "sandbox/sandbox.h"
#include "sandbox/seccomp.h"
#include "sandbox/unique_fd.h"

namespace flashroll {

namespace {

using sandbox::SandboxSpec;

// A manager for one sandbox that the caller destroys itself: no netns pool
// (its thread would make eight namespaces for nobody), no crash watcher.
sandbox::Manager::Options OneShotManagerOptions() {
  sandbox::Manager::Options options;
  options.netns_pool = 0;
  options.watch_crashes = false;
  return options;
}

int RunCommand(const std::vector<std::string>& args) {
  std::string image = "host", net = "none", memory, disk, timeout, cpuset, seccomp = "default", user;
  std::vector<std::string> allow, rw, command;
  int64_t pids = 0;
  double cpus = 0;
  bool unenforced = false;
  FlagParser flags("flashroll sandbox run [flags] -- CMD ARGS...",
                   "Runs CMD in a fresh sandbox with stdin, stdout and stderr passed through, and exits with its "
                   "exit code (124 on timeout, 137 when killed for memory). Nothing is left behind.");
  flags.String("--image", &image,
               "host, busybox, a directory used as the read-only root, or an OCI image layout DIR[:REF] "
               "(default host)");
  flags.String("--net", &net, "none (loopback only) or policy (egress allow rules)");
  flags.List("--allow", &allow, "IP[/N]:PORT egress allowed with --net policy (repeatable)");
  flags.String("--memory", &memory, "memory limit, e.g. 256M");
  flags.String("--disk", &disk,
               "bytes of the writable root (/tmp, /var/tmp, ...), on disk, not memory, e.g. 256M (default 1G)");
  flags.Int("--pids", &pids, "maximum number of processes");
  flags.Double("--cpus", &cpus, "CPU quota in CPUs, e.g. 0.5");
  flags.String("--cpuset", &cpuset, "CPUs the sandbox may run on, e.g. 0-1");
  flags.String("--user", &user,
               "USER[:GROUP] to run CMD as: names from the image's /etc/passwd and /etc/group, or numbers "
               "(default root, which holds the sandbox's bounded capabilities)");
  flags.String("--timeout", &timeout, "kill the command after this long, e.g. 10s (exit 124)");
  flags.List("--rw", &rw, "host path bound read-write at the same path (repeatable)");
  flags.String("--seccomp", &seccomp, "default or a JSON seccomp profile file (Docker's format, a subset)");
  flags.Bool("--allow-unenforced-limits", &unenforced,
             "without root (no cgroups), run with --memory/--pids/--cpus/--cpuset unenforced instead of refusing");
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
  if (!memory.empty()) {
    auto bytes = ParseByteSize(memory);
    if (!bytes.ok()) return ReportFailure(bytes.status().Wrap("--memory"));
    spec.memory_bytes = *bytes;
  }
  if (!disk.empty()) {
    auto bytes = ParseByteSize(disk);
    if (!bytes.ok()) return ReportFailure(bytes.status().Wrap("--disk"));
    spec.disk_bytes = *bytes;
  }
  spec.pids = pids;
  spec.cpus = cpus;
  spec.cpuset = cpuset;
  spec.rw_paths = rw;
  spec.seccomp = seccomp;
  if (seccomp != "default" && !seccomp.empty() && seccomp[0] != '/') {
    std::error_code error;
    spec.seccomp = std::filesystem::absolute(seccomp, error).string();
    if (error) return ReportFailure(Status::FromErrno(error.value(), "--seccomp " + seccomp));
  }
  sandbox::ExecRequest request;
  request.argv = command;
  if (Status s = sandbox::ParseUserGroup(user, &request.user, &request.group); !s.ok()) {
    return ReportFailure(s.Wrap("--user"));
  }
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

  // One sandbox, destroyed here: no pools to fill, no events to read.
  sandbox::Manager::Options manager_options = OneShotManagerOptions();
  manager_options.allow_unenforced_limits = unenforced;
  auto manager = sandbox::Manager::Open(manager_options);
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

// Splits "HOST:PORT"; the port must be 1..65535.
Status ParseListen(const std::string& text, std::string* host, int* port) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return Status::InvalidArgument("--listen: expected HOST:PORT, got \"" + text + "\"");
  }
  *host = text.substr(0, colon);
  const std::string digits = text.substr(colon + 1);
  char* end = nullptr;
  const long value = std::strtol(digits.c_str(), &end, 10);
  if (digits.empty() || *end != '\0' || value < 0 || value > 65535) {
    return Status::InvalidArgument("--listen: bad port \"" + digits + "\" in \"" + text + "\"");
  }
  *port = static_cast<int>(value);
  return Status::Ok();
}

// The daemon's settings: a --config file, or the bare flags' safe
// defaults (built-in images, no rw_paths, the default seccomp filter,
// default limits, one token holding every scope).
Result<sandbox::api::SandboxdConfig> DaemonConfig(const std::string& config_file, const std::string& token_file) {
  sandbox::api::SandboxdConfig config;
  if (!config_file.empty()) {
    if (!token_file.empty()) {
      return Status::InvalidArgument("sandboxd: --token-file and --config exclude each other (tokens: in the config)");
    }
    FR_ASSIGN_OR_RETURN(ConfigFile file, LoadYamlFile(config_file));
    return sandbox::api::ParseSandboxdConfig(file);
  }
  if (token_file.empty()) return Status::InvalidArgument("sandboxd: --token-file or --config is required");
  // Read here too, so that a bad file is named by the flag it came from.
  if (auto token = LoadTokenFile(token_file); !token.ok()) return token.status().Wrap("--token-file");
  config.tokens.push_back({"default", token_file, sandbox::api::AllScopes()});
  return config;
}

int RunDaemon(const std::vector<std::string>& args) {
  std::string config_file, listen, token_file;
  int64_t warm_pool = -1, netns_pool = -1;
  bool unenforced = false, insecure = false, keep = false;
  FlagParser flags("flashroll sandboxd (--config FILE | --listen HOST:PORT --token-file F)",
                   "Serves the sandbox node agent's HTTP API until SIGINT or SIGTERM, then destroys every "
                   "sandbox it holds, unless it keeps them (--keep-sandboxes, config keep_sandboxes): then they "
                   "run on, and the next sandboxd adopts them with their ids, owners and idempotency keys. Port 0 picks a free port (printed on stdout). Without --config: built-in "
                   "images only, no rw_paths, the default seccomp filter, limits by default 512M memory, 256 pids, "
                   "1 CPU, 1G disk and at most 4G, 4096, 4 CPUs, 4G, one token with every scope.");
  flags.String("--config", &config_file, "a `kind: sandboxd` YAML file (configs/sandboxd.yaml)");
  flags.String("--listen", &listen, "address to serve on (default 127.0.0.1:7070, or the config's)");
  flags.String("--token-file", &token_file, "file holding the bearer token clients must send (without --config)");
  flags.Int("--warm-pool", &warm_pool, "pre-started sandboxes kept per built-in image (default 0)");
  flags.Int("--netns-pool", &netns_pool, "fresh network namespaces made ahead of time (default 8; 0: none)");
  flags.Bool("--allow-unenforced-limits", &unenforced,
             "without root (no cgroups), create sandboxes whose limits cannot be enforced instead of refusing them");
  flags.Bool("--keep-sandboxes", &keep,
             "sandboxes outlive this sandboxd and the next one adopts them (unadopted: end after the config's "
             "orphan_timeout, 1h)");
  flags.Bool("--insecure", &insecure, "serve plain HTTP on a non-loopback address (tokens travel in clear)");
  if (auto exit = flags.ParseOrExit(args)) return *exit;
  auto config = DaemonConfig(config_file, token_file);
  if (!config.ok()) return ReportFailure(config.status());
  if (!listen.empty()) config->listen = listen;
  if (warm_pool != -1) config->warm_pool = warm_pool;
  if (netns_pool != -1) config->netns_pool = netns_pool;
  config->allow_unenforced_limits = config->allow_unenforced_limits || unenforced;
  config->keep_sandboxes = config->keep_sandboxes || keep;
  if (config->warm_pool < 0 || config->netns_pool < 0) {
    return ReportFailure(Status::InvalidArgument("sandboxd: --warm-pool and --netns-pool must be >= 0"));
  }
  HttpServerOptions options;
  // Many clients of one trainer host keep connections: workers are cheap
  // threads. A client without a token holds at most 16 of them from one
  // address, 32 in all, each for at most the header timeout.
  options.worker_threads = 64;
  options.max_unauthenticated_per_peer = 16;
  options.max_unauthenticated = 32;
  if (Status s = ParseListen(config->listen, &options.host, &options.port); !s.ok()) return ReportFailure(s);
  if (Status s = sandbox::api::CheckTransport(*config, insecure); !s.ok()) return ReportFailure(s.Wrap("sandboxd"));
  options.tls_cert_file = config->tls_cert;
  options.tls_key_file = config->tls_key;
  auto credentials = sandbox::api::LoadCredentials(*config);
  if (!credentials.ok()) return ReportFailure(credentials.status().Wrap("sandboxd"));
  options.credentials = std::move(*credentials);
  auto policy = sandbox::api::LoadNodePolicy(*config);
  if (!policy.ok()) return ReportFailure(policy.status().Wrap("sandboxd"));

  // Blocked before any thread starts, so that only sigwait sees them.
  sigset_t stop;
  sigemptyset(&stop);
  for (int sig : {SIGINT, SIGTERM}) sigaddset(&stop, sig);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  sandbox::Manager::Options manager_options;
  manager_options.warm_pool = static_cast<int>(config->warm_pool);
  manager_options.netns_pool = static_cast<int>(config->netns_pool);
  manager_options.allow_unenforced_limits = config->allow_unenforced_limits;
  manager_options.keep_sandboxes = config->keep_sandboxes;
  manager_options.orphan_timeout = config->orphan_timeout;
  auto manager = sandbox::Manager::Open(manager_options);
  if (!manager.ok()) return ReportFailure(manager.status().Wrap("sandboxd"));
  sandbox::api::SandboxServer server(manager->get(), std::move(*policy), options);
  if (Status s = server.Start(); !s.ok()) return ReportFailure(s.Wrap("sandboxd"));
  std::printf("%s\n", server.base_url().c_str());
  std::fflush(stdout);
  log::Info("sandboxd serving", {{"url", server.base_url()}, {"cgroups", (*manager)->cgroup_layout()}});

  int sig = 0;
  sigwait(&stop, &sig);
  log::Info("sandboxd stopping", {{"signal", sig}});
  server.Stop();
  if (config->keep_sandboxes) {
    // The Manager's destructor leaves them running for the next sandboxd.
    log::Info("sandboxd stopped; its sandboxes run on for the next sandboxd", {{"kept", (*manager)->List().size()}});
    return 0;
  }
  int failed = 0;
  const std::vector<std::string> ids = (*manager)->List();
  for (const auto& id : ids) {
    if (Status s = (*manager)->Destroy(id); !s.ok() && s.code() != Code::kNotFound) {
      log::Error("sandboxd: destroy failed", {{"id", id}, {"error", s.ToString()}});
      ++failed;
    }
  }
  log::Info("sandboxd stopped", {{"destroyed", ids.size() - failed}, {"failed", failed}});
  return failed == 0 ? 0 : 1;
}

int RunImageImport(const std::vector<std::string>& args) {
  std::string name, store = sandbox::kImageStoreDir;
  std::vector<std::string> source;
  FlagParser flags("flashroll image import DIR[:REF] --name NAME [--store DIR]",
                   "Adds an image to a node's image store, so that sandboxd serves it by NAME (list it under "
                   "`images` in the sandboxd config). DIR is an OCI image layout (REF picks the image by its "
                   "ref.name) or a directory tree, copied as it is.");
  flags.String("--name", &name, "the name requests use (letters, digits, '.', '_', '-'; required)");
  flags.String("--store", &store, std::string("the image store (default ") + sandbox::kImageStoreDir + ")");
  flags.Positional("DIR[:REF]", &source, "the image to import");
  if (auto exit = flags.ParseOrExit(args)) return *exit;
  if (source.size() != 1) return ReportFailure(Status::InvalidArgument("image import: expected one DIR[:REF]"));
  if (name.empty()) return ReportFailure(Status::InvalidArgument("image import: --name is required"));
  std::error_code error;
  const std::string absolute_source = std::filesystem::absolute(source[0], error).string();
  const std::string absolute_store = std::filesystem::absolute(store, error).string();
  if (error) return ReportFailure(Status::FromErrno(error.value(), "image import"));
  if (Status s = sandbox::ImportImage(absolute_store, absolute_source, name); !s.ok()) {
    return ReportFailure(s.Wrap("image import"));
  }
  std::printf("%s\n", name.c_str());
  return 0;
}

// Writes the default seccomp filter for another runtime to use: the
// compiled BPF program (bwrap --seccomp FD reads this) or the OCI
// linux.seccomp rules (crun, runc).
int RunSeccompExport(const std::vector<std::string>& args) {
  std::string format = "bpf";
  std::vector<std::string> file;
  FlagParser flags("flashroll sandbox seccomp-export [--format bpf|oci] FILE",
                   "Writes the default seccomp filter of every sandbox to FILE: as the compiled BPF program "
                   "(struct sock_filter array, native byte order; what `bwrap --seccomp FD` reads) or as an OCI "
                   "runtime-spec linux.seccomp object (what crun and runc take in config.json).");
  flags.String("--format", &format, "bpf (default) or oci");
  flags.Positional("FILE", &file, "where to write it");
  if (auto exit = flags.ParseOrExit(args)) return *exit;
  if (file.size() != 1) return ReportFailure(Status::InvalidArgument("sandbox seccomp-export: expected one FILE"));
  std::string bytes;
  if (format == "bpf") {
    auto program = sandbox::DefaultSeccompProgram();
    if (!program.ok()) return ReportFailure(program.status().Wrap("sandbox seccomp-export"));
    const auto& instructions = (*program)->instructions;
    bytes.assign(reinterpret_cast<const char*>(instructions.data()), instructions.size() * sizeof(sock_filter));
  } else if (format == "oci") {
    bytes = sandbox::DefaultSeccompOciJson();
  } else {
    return ReportFailure(Status::InvalidArgument("--format: expected bpf or oci, got \"" + format + "\""));
  }
  std::ofstream out(file[0], std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return ReportFailure(Status::FromErrno(errno, "sandbox seccomp-export: write " + file[0]));
  return 0;
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, static_cast<size_t>(p * static_cast<double>(values.size())))];
}

int RunBench(const std::vector<std::string>& args) {
  int64_t iterations = 200, threads = 8, warm_pool = 0, netns_pool = sandbox::Manager::Options().netns_pool;
  bool json = false;
  FlagParser flags("flashroll bench sandbox [--json] [--iterations N]",
                   "Times create + exec /bin/true + destroy with the full isolation stack (host image, "
                   "256 MiB memory and 64 pids limits, seccomp, fresh namespaces), one at a time (p50, p99), "
                   "then the churn of --threads workers doing the same cycle at once. Needs root.");
  flags.Int("--iterations", &iterations, "cycles timed one at a time, and in total for the churn (default 200)");
  flags.Int("--threads", &threads, "concurrent workers for the churn (default 8)");
  flags.Int("--warm-pool", &warm_pool, "pre-started sandboxes per image (default 0: every create starts cold)");
  flags.Int("--netns-pool", &netns_pool, "fresh network namespaces made ahead of time (default 8; 0: none)");
  flags.Bool("--json", &json, "print {\"p50_ms\":..., \"p99_ms\":..., \"churn_per_s\":...}");
  if (auto exit = flags.ParseOrExit(args)) return *exit;
  if (iterations < 1 || threads < 1) {
    return ReportFailure(Status::InvalidArgument("bench sandbox: --iterations and --threads must be >= 1"));
  }
  if (warm_pool < 0 || netns_pool < 0) {
    return ReportFailure(Status::InvalidArgument("bench sandbox: --warm-pool and --netns-pool must be >= 0"));
  }
  sandbox::Manager::Options options;
  options.warm_pool = static_cast<int>(warm_pool);
  options.netns_pool = static_cast<int>(netns_pool);
  auto opened = sandbox::Manager::Open(options);
  if (!opened.ok()) return ReportFailure(opened.status().Wrap("bench sandbox"));
  sandbox::Manager& manager = **opened;
  SandboxSpec spec;
  spec.memory_bytes = 256u << 20;
  spec.pids = 64;
  sandbox::ExecRequest request;
  request.argv = {"/bin/true"};
  auto cycle = [&]() -> Status {
    FR_ASSIGN_OR_RETURN(std::string id, manager.Create(spec));
    Result<sandbox::ExecResult> result = manager.Exec(id, request);
    Status destroyed = manager.Destroy(id);
    FR_RETURN_IF_ERROR(result.status());
    if (result->exit_code != 0) {
      return Status::Internal("bench sandbox: /bin/true exited " + std::to_string(result->exit_code));
    }
    return destroyed;
  };
  using Clock = std::chrono::steady_clock;
  auto ms_since = [](Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  // A few untimed cycles first: page cache, cgroup directories, the pool.
  for (int i = 0; i < 5; ++i) {
    if (Status s = cycle(); !s.ok()) return ReportFailure(s);
  }
  std::vector<double> latencies;
  for (int64_t i = 0; i < iterations; ++i) {
    if (warm_pool > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the pool refills
    const auto t0 = Clock::now();
    if (Status s = cycle(); !s.ok()) return ReportFailure(s);
    latencies.push_back(ms_since(t0));
  }
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  Status first_error;
  std::mutex error_mu;
  const auto churn_start = Clock::now();
  std::vector<std::thread> workers;
  for (int64_t t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      while (!failed && next++ < iterations) {
        if (Status s = cycle(); !s.ok()) {
          std::lock_guard<std::mutex> lock(error_mu);
          if (!failed.exchange(true)) first_error = s;
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  if (failed) return ReportFailure(first_error.Wrap("bench sandbox: churn"));
  const double churn = static_cast<double>(iterations) / (ms_since(churn_start) / 1000);
  const double p50 = Percentile(latencies, 0.5), p99 = Percentile(latencies, 0.99);
  if (json) {
    std::printf("{\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"churn_per_s\":%.1f}\n", p50, p99, churn);
  } else {
    std::printf("create + exec /bin/true + destroy: p50 %.2f ms, p99 %.2f ms (n=%lld)\n", p50, p99,
                static_cast<long long>(iterations));
    std::printf("churn with %lld workers: %.1f sandboxes/s\n", static_cast<long long>(threads), churn);
  }
  return 0;
}

}  // namespace

void RegisterSandboxCommands(Registry& registry) {
  registry.AddCommand({"sandbox run", "run a command in a fresh isolated sandbox", RunCommand});
  registry.AddCommand({"sandbox seccomp-export", "write the default seccomp filter as BPF or OCI JSON",
                       RunSeccompExport});
  registry.AddCommand({"sandboxd", "serve the sandbox node agent's HTTP API", RunDaemon});
  registry.AddCommand({"image import", "add an OCI layout or directory to a node's image store", RunImageImport});
  registry.AddConfigKind("sandboxd", [](const ConfigFile& file) {
    return sandbox::api::ParseSandboxdConfig(file).status();
  });
  registry.AddCommand({"bench sandbox", "time sandbox create + exec + destroy and churn (JSON with --json)",
                       RunBench});
}

}  // namespace flashroll
