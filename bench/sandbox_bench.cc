// Sandbox benchmarks, side by side in one run with crun, runc and
// bubblewrap (Debian's packages) where they are installed:
//
//  - create + exec /bin/true + destroy, p50 and p99, one at a time and 8 at
//    a time, and the churn (sandboxes/s) of 8 concurrent workers;
//  - the exec round trip on a live sandbox, in process and through the
//    node agent's HTTP API (sandbox/api/server.h) on loopback;
//  - idle live sandboxes per GiB: N idle sandboxes are started and the
//    memory they take is measured two ways (see MeasureIdle).
//
// Flashroll runs with its full isolation stack (fresh pid, mount, net, uts,
// ipc and cgroup namespaces, overlay root, seccomp, no_new_privs, Landlock
// where the kernel has it, 256 MiB memory and 64 pids limits). The runc and
// crun bundles use the same busybox tree as their read-only root, the same
// namespaces and the same memory and pids limits. crun needs a cgroup v1
// hugetlb hierarchy on this hybrid layout: the bench mounts one for the
// run when none is mounted and unmounts it afterwards.
//
// usage: sandbox_bench [--iterations N] [--idle N] [--json]    (needs root)
#include <dirent.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/http.h"
#include "sandbox/api/client.h"
#include "sandbox/api/server.h"
#include "sandbox/image.h"
#include "sandbox/naming.h"
#include "sandbox/sandbox.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
using flashroll::sandbox::ExecRequest;
using flashroll::sandbox::ImageKind;
using flashroll::sandbox::Manager;
using flashroll::sandbox::SandboxSpec;

constexpr int kConcurrency = 8;

struct Stats {
  double p50 = 0, p99 = 0;
  size_t n = 0;
};

Stats Summarise(std::vector<double> ms) {
  Stats s;
  if (ms.empty()) return s;
  std::sort(ms.begin(), ms.end());
  s.n = ms.size();
  s.p50 = ms[ms.size() / 2];
  s.p99 = ms[std::min(ms.size() - 1, ms.size() * 99 / 100)];
  return s;
}

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Runs argv to completion with output discarded; returns its exit status or -1.
int Spawn(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
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

// An OCI bundle running /bin/true on the busybox tree Flashroll uses.
void MakeOciBundle(const std::string& dir) {
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
      {"root", {{"path", flashroll::sandbox::kBusyboxImageDir}, {"readonly", true}}},
      {"hostname", "bench"},
      {"mounts",
       {{{"destination", "/proc"}, {"type", "proc"}, {"source", "proc"}},
        {{"destination", "/dev"}, {"type", "tmpfs"}, {"source", "tmpfs"}, {"options", {"nosuid", "mode=755"}}},
        {{"destination", "/tmp"}, {"type", "tmpfs"}, {"source", "tmpfs"}, {"options", {"nosuid", "nodev"}}}}},
      {"linux",
       {{"namespaces",
         {{{"type", "pid"}}, {{"type", "network"}}, {{"type", "ipc"}}, {{"type", "uts"}}, {{"type", "mount"}},
          {{"type", "cgroup"}}}},
        {"resources", {{"pids", {{"limit", 64}}}, {"memory", {{"limit", 268435456}}}}}}}};
  std::ofstream(dir + "/config.json") << config.dump(2);
}

// Mounts a cgroup v1 hugetlb hierarchy when the layout is hybrid and none is
// mounted (crun refuses to start otherwise); undone on destruction.
class HugetlbMount {
 public:
  HugetlbMount() {
    struct stat st;
    if (stat("/sys/fs/cgroup/unified", &st) != 0) return;  // pure v2: not needed
    if (stat(kPath, &st) == 0 && st.st_dev != DevOf("/sys/fs/cgroup")) return;  // mounted already
    made_dir_ = mkdir(kPath, 0755) == 0;
    if (mount("cgroup", kPath, "cgroup", 0, "hugetlb") == 0) {
      mounted_ = true;
    } else {
      std::fprintf(stderr, "sandbox_bench: mount hugetlb cgroup at %s: %s (crun may fail)\n", kPath,
                   std::strerror(errno));
    }
  }
  ~HugetlbMount() {
    if (mounted_) {
      // crun leaves its (empty) per-container directories behind on v1.
      RemoveChildren(kPath);
      if (umount(kPath) != 0) std::fprintf(stderr, "sandbox_bench: umount %s: %s\n", kPath, std::strerror(errno));
    }
    if (made_dir_) rmdir(kPath);
  }
  bool mounted() const { return mounted_; }

 private:
  static constexpr char kPath[] = "/sys/fs/cgroup/hugetlb";
  static dev_t DevOf(const char* path) {
    struct stat st;
    return stat(path, &st) == 0 ? st.st_dev : 0;
  }
  static void RemoveChildren(const std::string& dir) {
    std::vector<std::string> children;
    if (DIR* d = opendir(dir.c_str())) {
      while (dirent* e = readdir(d)) {
        if (e->d_type == DT_DIR && std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
          children.push_back(dir + "/" + e->d_name);
        }
      }
      closedir(d);
    }
    for (const auto& child : children) {
      RemoveChildren(child);
      rmdir(child.c_str());
    }
  }
  bool made_dir_ = false;
  bool mounted_ = false;
};

// One runtime under test: `cycle(n)` does one create + exec /bin/true +
// destroy (n is unique across the run, for container names).
struct Contender {
  Contender(std::string n, std::function<bool(int)> c) : name(std::move(n)), cycle(std::move(c)) {}
  std::string name;
  std::function<bool(int)> cycle;
  std::vector<double> alone_ms, concurrent_ms;
  double concurrent_seconds = 0;
  int failures = 0;
};

// Times every contender's cycle `iterations` times one at a time and
// `iterations` times spread over kConcurrency workers. The machine is
// shared with other work whose load changes by the second, so the
// contenders take turns in `rounds` rounds of iterations/rounds cycles
// each: a busy spell hits all of them alike instead of whichever ran then.
void RunInterleaved(std::vector<Contender>& contenders, int iterations, int rounds) {
  std::atomic<int> serial{0};
  for (auto& c : contenders) {
    for (int i = 0; i < 5; ++i) c.failures += c.cycle(serial++) ? 0 : 1;  // caches, cgroup dirs
  }
  const int per_round = std::max(1, iterations / rounds);
  for (int round = 0; round < rounds; ++round) {
    for (auto& c : contenders) {
      for (int i = 0; i < per_round; ++i) {
        const auto t0 = Clock::now();
        if (c.cycle(serial++)) c.alone_ms.push_back(Ms(Clock::now() - t0));
        else ++c.failures;
      }
    }
    for (auto& c : contenders) {
      std::atomic<int> next{0}, failed{0};
      std::vector<std::vector<double>> per_worker(kConcurrency);
      const auto t0 = Clock::now();
      std::vector<std::thread> workers;
      for (int w = 0; w < kConcurrency; ++w) {
        workers.emplace_back([&, w] {
          while (next++ < per_round) {
            const auto s = Clock::now();
            if (c.cycle(serial++)) per_worker[w].push_back(Ms(Clock::now() - s));
            else ++failed;
          }
        });
      }
      for (auto& t : workers) t.join();
      c.concurrent_seconds += Ms(Clock::now() - t0) / 1000;
      for (auto& v : per_worker) c.concurrent_ms.insert(c.concurrent_ms.end(), v.begin(), v.end());
      c.failures += failed;
    }
  }
}

// Bytes of a /proc/meminfo field ("MemAvailable").
uint64_t MemInfo(const std::string& field) {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (in >> key >> kb) {
    std::getline(in, unit);
    if (key == field + ":") return kb * 1024;
  }
  return 0;
}

// The kernel-side memory that sandboxes add to: slab (namespaces, mounts,
// cgroups, dentries), kernel stacks, page tables and shmem (tmpfs upper
// layers and /dev).
uint64_t KernelSide() {
  return MemInfo("Slab") + MemInfo("KernelStack") + MemInfo("PageTables") + MemInfo("Shmem");
}

uint64_t ReadNumber(const std::string& path) {
  std::ifstream in(path);
  uint64_t v = 0;
  in >> v;
  return v;
}

struct IdleResults {
  int count = 0;
  double host_bytes_each = 0;    // drop of MemAvailable / count
  double cgroup_bytes_each = 0;  // mean memory cgroup usage of one sandbox
  double kernel_bytes_each = 0;  // growth of KernelSide() / count
  double per_gib = 0;            // from the larger of the two
  double in_8_gib = 0;
};

// Starts `count` idle sandboxes and measures what they take: (1) the drop
// of the host's MemAvailable (everything, kernel objects included, but the
// machine is shared, so other processes add noise; the median of three
// readings a second apart is used at each end), and (2) the mean of the
// sandboxes' own memory cgroups (what is charged to them, kernel memory
// included on this v1 layout, but not what the manager allocates for them).
// (3) the growth of the kernel's slab, stacks, page tables and shmem. The
// estimate uses the larger of (1) and (2) + (3).
IdleResults MeasureIdle(Manager& manager, int count, const SandboxSpec& spec) {
  auto settle = [](const std::function<uint64_t()>& read) {
    std::vector<uint64_t> v;
    for (int i = 0; i < 3; ++i) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      v.push_back(read());
    }
    std::sort(v.begin(), v.end());
    return v[1];
  };
  auto available = [] { return MemInfo("MemAvailable"); };
  IdleResults out;
  const uint64_t before = settle(available);
  const uint64_t kernel_before = KernelSide();
  std::vector<std::string> ids;
  for (int i = 0; i < count; ++i) {
    auto id = manager.Create(spec);
    if (!id.ok()) {
      std::fprintf(stderr, "sandbox_bench: idle sandbox %d: %s\n", i, id.status().ToString().c_str());
      break;
    }
    ids.push_back(*id);
  }
  const uint64_t after = settle(available);
  const uint64_t kernel_after = KernelSide();
  out.count = static_cast<int>(ids.size());
  if (out.count == 0) return out;
  out.host_bytes_each = before > after ? static_cast<double>(before - after) / out.count : 0;
  out.kernel_bytes_each =
      kernel_after > kernel_before ? static_cast<double>(kernel_after - kernel_before) / out.count : 0;
  double cgroup_total = 0;
  for (const auto& id : ids) {
    cgroup_total += static_cast<double>(ReadNumber("/sys/fs/cgroup/memory/flashroll/" + id + "/memory.usage_in_bytes") +
                                        ReadNumber("/sys/fs/cgroup/flashroll/" + id + "/memory.current"));
  }
  out.cgroup_bytes_each = cgroup_total / out.count;
  // Kernel memory charged to the cgroups is also in the slab figure, so
  // their sum over-counts a little: the conservative side.
  const double each = std::max(out.host_bytes_each, out.cgroup_bytes_each + out.kernel_bytes_each);
  out.per_gib = each > 0 ? static_cast<double>(1ull << 30) / each : 0;
  out.in_8_gib = out.per_gib * 8;
  for (const auto& id : ids) (void)manager.Destroy(id);
  return out;
}

nlohmann::json ToJson(const Stats& s) { return {{"p50_ms", s.p50}, {"p99_ms", s.p99}, {"n", s.n}}; }

}  // namespace

int main(int argc, char** argv) {
  int iterations = 200, idle = 1000;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--iterations") == 0 && i + 1 < argc) iterations = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--idle") == 0 && i + 1 < argc) idle = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--json") == 0) json = true;
    else {
      std::fprintf(stderr, "usage: sandbox_bench [--iterations N] [--idle N] [--json]\n");
      return 2;
    }
  }
  if (geteuid() != 0) {
    std::fprintf(stderr, "sandbox_bench: needs root\n");
    return 2;
  }
  auto opened = Manager::Open();
  if (!opened.ok()) {
    std::fprintf(stderr, "sandbox_bench: %s\n", opened.status().ToString().c_str());
    return 1;
  }
  Manager& manager = **opened;
  double load[3] = {0, 0, 0};
  getloadavg(load, 3);
  nlohmann::json out = {{"iterations", iterations},
                        {"concurrency", kConcurrency},
                        {"cpus", std::thread::hardware_concurrency()},
                        {"loadavg_1m_at_start", load[0]}};
  ExecRequest true_request;
  true_request.argv = {"/bin/true"};
  auto flashroll_cycle = [&](Manager& m, const SandboxSpec& spec) {
    return [&m, spec, &true_request](int) {
      auto id = m.Create(spec);
      if (!id.ok()) {
        std::fprintf(stderr, "create: %s\n", id.status().ToString().c_str());
        return false;
      }
      auto r = m.Exec(*id, true_request);
      const bool destroyed = m.Destroy(*id).ok();
      return r.ok() && r->exit_code == 0 && destroyed;
    };
  };
  const std::string bundle = "/tmp/flashroll-bench-bundle-" + std::to_string(getpid());
  MakeOciBundle(bundle);
  HugetlbMount hugetlb;
  out["crun_hugetlb_mounted_by_bench"] = hugetlb.mounted();
  SandboxSpec host_spec;
  host_spec.memory_bytes = 256u << 20;
  host_spec.pids = 64;
  SandboxSpec busybox_spec = host_spec;
  busybox_spec.image = ImageKind::kBusybox;

  // Exec round trips on one live sandbox: in process, then over HTTP.
  {
    auto id = manager.Create(host_spec);
    if (!id.ok()) return 1;
    std::vector<double> local_ms, http_ms, http_noop_ms;
    for (int i = 0; i < iterations; ++i) {
      const auto t0 = Clock::now();
      auto r = manager.Exec(*id, true_request);
      if (r.ok()) local_ms.push_back(Ms(Clock::now() - t0));
    }
    flashroll::HttpServerOptions server_options;
    server_options.bearer_token = "bench-token";
    flashroll::sandbox::api::SandboxServer server(&manager, flashroll::sandbox::api::NodePolicy(), server_options);
    if (server.Start().ok()) {
      flashroll::HttpClientOptions client_options;
      client_options.base_url = server.base_url();
      client_options.bearer_token = "bench-token";
      auto client = flashroll::sandbox::api::HttpSandboxClient::Create(client_options);
      auto raw = flashroll::HttpClient::Create(client_options);
      flashroll::sandbox::api::ExecCall call;
      call.argv = {"/bin/true"};
      for (int i = 0; i < iterations + 5 && client.ok(); ++i) {
        const auto t0 = Clock::now();
        auto r = (*client)->Exec(*id, call);
        if (r.ok() && i >= 5) http_ms.push_back(Ms(Clock::now() - t0));
      }
      for (int i = 0; i < iterations + 5 && raw.ok(); ++i) {
        const auto t0 = Clock::now();
        auto r = raw->Get("/metrics");
        if (r.ok() && i >= 5) http_noop_ms.push_back(Ms(Clock::now() - t0));
      }
      server.Stop();
    }
    (void)manager.Destroy(*id);
    const Stats local = Summarise(local_ms), http = Summarise(http_ms), noop = Summarise(http_noop_ms);
    out["exec_roundtrip"] = {{"in_process", ToJson(local)}, {"http", ToJson(http)}, {"http_no_exec", ToJson(noop)}};
    if (!json) {
      std::printf("exec /bin/true on a live sandbox: in process p50 %.3f ms, over HTTP p50 %.3f ms (p99 %.3f); "
                  "HTTP request alone p50 %.3f ms\n",
                  local.p50, http.p50, http.p99, noop.p50);
      std::fflush(stdout);
    }
  }

  if (idle > 0) {
    const IdleResults r = MeasureIdle(manager, idle, busybox_spec);
    out["idle"] = {{"count", r.count},
                   {"host_bytes_each", r.host_bytes_each},
                   {"cgroup_bytes_each", r.cgroup_bytes_each},
                   {"kernel_bytes_each", r.kernel_bytes_each},
                   {"per_gib", r.per_gib},
                   {"in_8_gib", r.in_8_gib}};
    if (!json) {
      std::printf("idle busybox sandboxes: %d started; %.0f KiB each by MemAvailable, %.0f KiB charged to their "
                  "cgroups, %.0f KiB of kernel slab/stacks/page tables/shmem; %.0f per GiB, %.0f in 8 GiB\n",
                  r.count, r.host_bytes_each / 1024, r.cgroup_bytes_each / 1024, r.kernel_bytes_each / 1024,
                  r.per_gib, r.in_8_gib);
      std::fflush(stdout);
    }
  }

  {
    Manager::Options pool_options;
    pool_options.warm_pool = kConcurrency;
    auto pooled = Manager::Open(pool_options);
    if (!pooled.ok()) {
      std::fprintf(stderr, "sandbox_bench: %s\n", pooled.status().ToString().c_str());
      return 1;
    }
    std::vector<Contender> contenders;
    contenders.push_back({"flashroll (host image)", flashroll_cycle(manager, host_spec)});
    contenders.push_back({"flashroll (busybox)", flashroll_cycle(manager, busybox_spec)});
    contenders.push_back({"flashroll (host, warm pool 8)", flashroll_cycle(**pooled, host_spec)});
    if (Executable("/usr/bin/bwrap")) {
      contenders.push_back({"bubblewrap (host /usr)", [](int) {
                              return Spawn({"/usr/bin/bwrap", "--unshare-all", "--die-with-parent", "--ro-bind",
                                            "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib",
                                            "/lib", "--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev",
                                            "/dev", "--tmpfs", "/tmp", "/bin/true"}) == 0;
                            }});
    }
    const std::string tag = std::to_string(getpid());
    if (Executable("/usr/sbin/runc")) {
      contenders.push_back({"runc run (busybox rootfs)", [&](int i) {
                              return Spawn({"/usr/sbin/runc", "run", "--bundle", bundle,
                                            "fr-bench-runc-" + tag + "-" + std::to_string(i)}) == 0;
                            }});
    }
    if (Executable("/usr/bin/crun")) {
      contenders.push_back({"crun run (busybox rootfs)", [&](int i) {
                              return Spawn({"/usr/bin/crun", "run", "--bundle", bundle,
                                            "fr-bench-crun-" + tag + "-" + std::to_string(i)}) == 0;
                            }});
    }
    RunInterleaved(contenders, iterations, 10);
    for (const auto& c : contenders) {
      const Stats alone = Summarise(c.alone_ms), concurrent = Summarise(c.concurrent_ms);
      const double churn =
          c.concurrent_seconds > 0 ? static_cast<double>(c.concurrent_ms.size()) / c.concurrent_seconds : 0;
      out["cycles"][c.name] = {{"alone", ToJson(alone)},
                               {"concurrent", ToJson(concurrent)},
                               {"churn_per_s", churn},
                               {"failures", c.failures}};
      if (!json) {
        std::printf("%-30s alone p50 %6.2f p99 %6.2f | x%d p50 %6.2f p99 %6.2f ms | %6.1f/s", c.name.c_str(),
                    alone.p50, alone.p99, kConcurrency, concurrent.p50, concurrent.p99, churn);
        if (c.failures > 0) std::printf(" (%d failed)", c.failures);
        std::printf("\n");
      }
    }
  }
  std::remove((bundle + "/config.json").c_str());
  rmdir(bundle.c_str());
  getloadavg(load, 3);
  out["loadavg_1m_at_end"] = load[0];
  if (json) std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
