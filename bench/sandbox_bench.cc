// Sandbox start-up latency: create + exec /bin/true + destroy, p50 and p99,
// cold and from a warm pool, alone and 8 at a time (churn), the exec round
// trip on a live sandbox, and
// the same cycle with runc and bubblewrap when they are installed, in the
// same run. Needs root.
//
// usage: sandbox_bench [--iterations N] [--json]
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "sandbox/sandbox.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
using flashroll::sandbox::ExecRequest;
using flashroll::sandbox::Manager;
using flashroll::sandbox::SandboxSpec;

struct Stats {
  double p50 = 0, p99 = 0, mean = 0;
  size_t n = 0;
};

Stats Summarise(std::vector<double> ms) {
  Stats s;
  if (ms.empty()) return s;
  std::sort(ms.begin(), ms.end());
  s.n = ms.size();
  s.p50 = ms[ms.size() / 2];
  s.p99 = ms[std::min(ms.size() - 1, ms.size() * 99 / 100)];
  double sum = 0;
  for (double v : ms) sum += v;
  s.mean = sum / static_cast<double>(ms.size());
  return s;
}

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Runs argv to completion; returns its exit status or -1.
int Spawn(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool Executable(const char* path) { return access(path, X_OK) == 0; }

// A runc bundle running /bin/true in the busybox image, read-only.
bool MakeOciBundle(const std::string& dir) {
  mkdir(dir.c_str(), 0755);
  nlohmann::json config = {
      {"ociVersion", "1.0.2"},
      {"process",
       {{"terminal", false},
        {"user", {{"uid", 0}, {"gid", 0}}},
        {"args", {"/bin/true"}},
        {"env", {"PATH=/bin:/usr/bin"}},
        {"cwd", "/"},
        {"noNewPrivileges", true}}},
      {"root", {{"path", "/var/lib/flashroll/images/busybox"}, {"readonly", true}}},
      {"hostname", "bench"},
      {"mounts",
       {{{"destination", "/proc"}, {"type", "proc"}, {"source", "proc"}},
        {{"destination", "/dev"}, {"type", "tmpfs"}, {"source", "tmpfs"}, {"options", {"nosuid", "mode=755"}}}}},
      {"linux",
       {{"namespaces",
         {{{"type", "pid"}}, {{"type", "network"}}, {{"type", "ipc"}}, {{"type", "uts"}}, {{"type", "mount"}}}},
        {"resources", {{"pids", {{"limit", 64}}}, {"memory", {{"limit", 268435456}}}}}}}};
  std::ofstream(dir + "/config.json") << config.dump(2);
  return true;
}

void Print(const char* name, const Stats& s, bool json, nlohmann::json* out) {
  if (json) {
    (*out)[name] = {{"p50_ms", s.p50}, {"p99_ms", s.p99}, {"mean_ms", s.mean}, {"n", s.n}};
  } else {
    std::printf("%-34s p50 %7.2f ms  p99 %7.2f ms  mean %7.2f ms  (n=%zu)\n", name, s.p50, s.p99, s.mean, s.n);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int iterations = 200;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--iterations") == 0 && i + 1 < argc) iterations = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--json") == 0) json = true;
  }
  if (geteuid() != 0) {
    std::fprintf(stderr, "sandbox_bench: needs root\n");
    return 2;
  }
  auto manager = Manager::Open();
  if (!manager.ok()) {
    std::fprintf(stderr, "sandbox_bench: %s\n", manager.status().ToString().c_str());
    return 1;
  }
  nlohmann::json out;
  ExecRequest true_request;
  true_request.argv = {"/bin/true"};

  auto cycle = [&](const SandboxSpec& spec) -> bool {
    auto id = (*manager)->Create(spec);
    if (!id.ok()) {
      std::fprintf(stderr, "create: %s\n", id.status().ToString().c_str());
      return false;
    }
    auto r = (*manager)->Exec(*id, true_request);
    const bool ok = r.ok() && r->exit_code == 0 && (*manager)->Destroy(*id).ok();
    if (!ok) std::fprintf(stderr, "exec/destroy failed\n");
    return ok;
  };

  for (const auto& [label, image] :
       std::vector<std::pair<const char*, flashroll::sandbox::ImageKind>>{
           {"flashroll host image", flashroll::sandbox::ImageKind::kHost},
           {"flashroll busybox image", flashroll::sandbox::ImageKind::kBusybox}}) {
    SandboxSpec spec;
    spec.image = image;
    spec.memory_bytes = 256 << 20;
    spec.pids = 64;
    std::vector<double> ms;
    for (int i = 0; i < iterations + 5; ++i) {
      const auto t0 = Clock::now();
      if (!cycle(spec)) return 1;
      if (i >= 5) ms.push_back(Ms(Clock::now() - t0));  // the first few warm caches
    }
    Print(label, Summarise(ms), json, &out);
  }

  {
    // With a warm pool, at 40 arrivals/s (the pool refills between them).
    Manager::Options options;
    options.warm_pool = 2;
    auto pooled = Manager::Open(options);
    if (!pooled.ok()) return 1;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    for (const auto& [label, image] :
         std::vector<std::pair<const char*, flashroll::sandbox::ImageKind>>{
             {"flashroll host, warm pool", flashroll::sandbox::ImageKind::kHost},
             {"flashroll busybox, warm pool", flashroll::sandbox::ImageKind::kBusybox}}) {
      SandboxSpec spec;
      spec.image = image;
      spec.memory_bytes = 256 << 20;
      spec.pids = 64;
      std::vector<double> ms;
      for (int i = 0; i < iterations; ++i) {
        const auto t0 = Clock::now();
        auto id = (*pooled)->Create(spec);
        if (!id.ok()) return 1;
        auto r = (*pooled)->Exec(*id, true_request);
        if (!r.ok() || r->exit_code != 0 || !(*pooled)->Destroy(*id).ok()) return 1;
        ms.push_back(Ms(Clock::now() - t0));
        std::this_thread::sleep_for(std::chrono::milliseconds(25));
      }
      Print(label, Summarise(ms), json, &out);
    }
  }

  {
    // Churn: 8 threads creating and destroying at once.
    SandboxSpec spec;
    spec.image = flashroll::sandbox::ImageKind::kBusybox;
    std::atomic<int> done{0}, failed{0};
    std::vector<std::vector<double>> per_thread(8);
    const auto t0 = Clock::now();
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < std::max(1, iterations / 8); ++i) {
          const auto s = Clock::now();
          if (!cycle(spec)) {
            ++failed;
            return;
          }
          per_thread[t].push_back(Ms(Clock::now() - s));
          ++done;
        }
      });
    }
    for (auto& th : threads) th.join();
    const double seconds = Ms(Clock::now() - t0) / 1000;
    std::vector<double> all;
    for (auto& v : per_thread) all.insert(all.end(), v.begin(), v.end());
    Print("flashroll busybox, 8 at a time", Summarise(all), json, &out);
    const double churn = done / seconds;
    if (json) out["churn_per_s"] = churn;
    else std::printf("%-34s %.1f sandboxes/s (%d failed)\n", "flashroll churn, 8 threads", churn, failed.load());
  }

  {
    // Exec round trip on one live sandbox.
    auto id = (*manager)->Create(SandboxSpec());
    if (!id.ok()) return 1;
    std::vector<double> ms;
    for (int i = 0; i < iterations; ++i) {
      const auto t0 = Clock::now();
      auto r = (*manager)->Exec(*id, true_request);
      if (!r.ok()) return 1;
      ms.push_back(Ms(Clock::now() - t0));
    }
    (void)(*manager)->Destroy(*id);
    Print("flashroll exec /bin/true (live)", Summarise(ms), json, &out);
  }

  auto peer = [&](const char* name, const std::function<std::vector<std::string>(int)>& command) {
    std::vector<double> ms;
    int failures = 0;
    for (int i = 0; i < iterations + 5; ++i) {
      const auto t0 = Clock::now();
      if (Spawn(command(i)) != 0) ++failures;
      if (i >= 5) ms.push_back(Ms(Clock::now() - t0));
    }
    if (failures > 0) {
      if (json) out[name] = {{"error", std::to_string(failures) + " runs failed"}};
      else std::printf("%-34s %d of %d runs failed\n", name, failures, iterations + 5);
      return;
    }
    Print(name, Summarise(ms), json, &out);
  };
  if (Executable("/usr/bin/bwrap")) {
    peer("bubblewrap (host /usr)", [](int) -> std::vector<std::string> {
      return {"/usr/bin/bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr", "--symlink",
              "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--proc",
              "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "/bin/true"};
    });
  }
  const std::string bundle = "/tmp/flashroll-bench-bundle-" + std::to_string(getpid());
  MakeOciBundle(bundle);
  const std::string pid = std::to_string(getpid());
  if (Executable("/usr/sbin/runc")) {
    peer("runc run (busybox rootfs)", [&](int i) -> std::vector<std::string> {
      return {"/usr/sbin/runc", "run", "--bundle", bundle, "fr-bench-runc-" + pid + "-" + std::to_string(i)};
    });
  }
  if (Executable("/usr/bin/crun")) {
    peer("crun run (busybox rootfs)", [&](int i) -> std::vector<std::string> {
      return {"/usr/bin/crun", "run", "--bundle", bundle, "fr-bench-crun-" + pid + "-" + std::to_string(i)};
    });
  }
  std::remove((bundle + "/config.json").c_str());
  rmdir(bundle.c_str());
  if (json) std::printf("%s\n", out.dump().c_str());
  return 0;
}
