// Create/exec/destroy cycles and a killed manager leave nothing behind: no
// cgroups (v1 or v2), mounts, network namespaces, veths, BPF links, open
// descriptors or child processes.
#include <bpf/bpf.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fcntl.h>
#include <sstream>
#include <mutex>
#include <set>
#include <thread>

#include "sandbox/bpf_pins.h"
#include "sandbox/net_policy.h"
#include "sandbox/veth.h"
#include "tests/sandbox/sandbox_fixture.h"
#include "tests/slow_tests.h"

#if defined(__SANITIZE_ADDRESS__) || defined(FLASHROLL_SANITIZE)
#define FR_LEAK_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FR_LEAK_SANITIZED 1
#endif
#endif

namespace flashroll::sandbox {
namespace {

// 400 cycles in `make test`, 10,000 (1,000 under ASan) in `make test-slow`.
int Cycles() {
#ifdef FR_LEAK_SANITIZED
  return testing_support::FastOrSlow(400, 1000);
#else
  return testing_support::FastOrSlow(400, 10000);
#endif
}
constexpr int kPolicyEvery = 50;  // every 50th cycle is a --net policy sandbox

size_t EntriesIn(const char* dir) {
  size_t n = 0;
  if (DIR* d = opendir(dir)) {
    while (dirent* e = readdir(d)) n += std::string(e->d_name) != "." && std::string(e->d_name) != "..";
    closedir(d);
  }
  return n;
}

// This process's open descriptors once the count holds still: a manager's
// NetnsPool (netns_pool.h) refills in the background after each sandbox
// takes a namespace, so a count taken mid-refill would differ by those.
size_t SettledDescriptorCount() {
  size_t last = EntriesIn("/proc/self/fd");
  for (int stable = 0, i = 0; stable < 4 && i < 400; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const size_t now = EntriesIn("/proc/self/fd");
    stable = now == last ? stable + 1 : 0;
    last = now;
  }
  return last;
}

// Distinct network namespaces of this process's children (a sandbox's
// init is one; what runs inside dies with it). Other processes on a shared
// host come and go with their own. A namespace kept by a descriptor or a
// mount instead shows in the fd and mount counts.
std::set<ino_t> NetNamespaces() {
  std::set<ino_t> found;
  const std::string ppid_line = "PPid:\t" + std::to_string(getpid()) + "\n";
  DIR* proc = opendir("/proc");
  while (dirent* e = proc != nullptr ? readdir(proc) : nullptr) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    if (ReadHostFile(std::string("/proc/") + e->d_name + "/status").find(ppid_line) == std::string::npos) continue;
    struct stat st {};
    if (stat((std::string("/proc/") + e->d_name + "/ns/net").c_str(), &st) == 0) found.insert(st.st_ino);
  }
  if (proc != nullptr) closedir(proc);
  return found;
}

// BPF links of this process's network policy programs (other processes'
// programs on a shared host are not ours to count).
size_t BpfLinks() {
  auto bpf = NetPolicyManager::Shared();
  if (!bpf.ok()) return 0;
  const auto& programs = (*bpf)->kernel_ids().programs;
  size_t n = 0;
  for (__u32 id = 0; bpf_link_get_next_id(id, &id) == 0;) {
    const int fd = bpf_link_get_fd_by_id(id);
    if (fd < 0) continue;
    bpf_link_info info {};
    __u32 len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0 &&
        std::find(programs.begin(), programs.end(), info.prog_id) != programs.end()) {
      ++n;
    }
    close(fd);
  }
  return n;
}

// Host-side veths that a sandbox named `prefix`... created.
std::vector<std::string> VethsOf(const std::string& prefix) {
  std::vector<std::string> found;
  for (const auto& name : ListVeths()) {
    if (ReadHostFile("/sys/class/net/" + name + "/ifalias").rfind(prefix, 0) == 0) found.push_back(name);
  }
  return found;
}

// Host state a sandbox could leak. Network namespaces are compared as
// "none of the ones that appeared is left" since other processes on the
// host may come and go.
struct HostState {
  size_t mounts = MountCount();
  size_t run_entries = EntriesIn("/run/flashroll");
  size_t fds = SettledDescriptorCount();
  size_t bpf_links = BpfLinks();
  std::set<ino_t> netns = NetNamespaces();
};

void ExpectNothingLeft(const HostState& before, const std::string& prefix) {
  EXPECT_TRUE(CgroupDirsWithPrefix(prefix).empty());
  EXPECT_EQ(MountCount(), before.mounts);
  EXPECT_EQ(EntriesIn("/run/flashroll"), before.run_entries);
  EXPECT_EQ(SettledDescriptorCount(), before.fds);
  EXPECT_EQ(BpfLinks(), before.bpf_links);
  // The kernel frees a namespace (and deletes its veth) shortly after its
  // last process is reaped; give it a moment.
  for (int i = 0; i < 200; ++i) {
    bool extra_netns = false;
    for (ino_t ns : NetNamespaces()) extra_netns |= before.netns.count(ns) == 0;
    if (!extra_netns && VethsOf(prefix).empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(VethsOf(prefix).empty()) << ::testing::PrintToString(VethsOf(prefix));
  for (ino_t ns : NetNamespaces()) EXPECT_EQ(before.netns.count(ns), 1u) << "network namespace " << ns << " appeared";
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1) << "a child process is left";
}

class SandboxLeakTest : public SandboxFixture {};

TEST_F(SandboxLeakTest, ManyCyclesLeaveNothingBehind) {
  // What is set up once per process (the BPF programs, the init's memfd)
  // or per boot (the bpffs for pins) is not a leak: set it up before taking
  // stock.
  ASSERT_TRUE(NetPolicyManager::Shared().ok());
  ASSERT_TRUE(EnsureBpfPinRoot().ok());
  ASSERT_TRUE(manager_->Destroy(CreateOrDie()).ok());
  const HostState before;
  SandboxSpec policy;
  policy.net = NetMode::kPolicy;
  auto rule = ParseAllowRule("10.213.0.0/16:80");
  ASSERT_TRUE(rule.ok());
  policy.allow.push_back(*rule);
  // A few workers at once: a cycle mostly waits on the kernel (RCU grace
  // periods when namespaces and cgroups go), so this keeps the wall time
  // down on two cores, and it exercises concurrent create/destroy too.
  constexpr int kWorkers = 4;
  const int cycles = Cycles();
  std::atomic<int> next{0};
  std::atomic<bool> failed{false};
  std::mutex failure_mu;
  std::string failure;
  auto worker = [&] {
    for (int i; !failed && (i = next.fetch_add(1)) < cycles;) {
      auto fail = [&](const std::string& what) {
        std::lock_guard<std::mutex> lock(failure_mu);
        if (!failed.exchange(true)) failure = "cycle " + std::to_string(i) + ": " + what;
      };
      auto id = manager_->Create(i % kPolicyEvery == kPolicyEvery - 1 ? policy : SandboxSpec());
      if (!id.ok()) return fail(id.status().ToString());
      ExecRequest request;
      request.argv = {"/bin/true"};
      auto r = manager_->Exec(*id, request);
      if (!r.ok()) return fail(r.status().ToString());
      if (r->exit_code != 0) return fail("exit code " + std::to_string(r->exit_code));
      if (Status s = manager_->Destroy(*id); !s.ok()) return fail(s.ToString());
    }
  };
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) workers.emplace_back(worker);
  for (auto& t : workers) t.join();
  ASSERT_FALSE(failed) << failure;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("leak test: %d create/exec/destroy cycles (%d with --net policy, %d at a time) in %.1f s, "
              "%.2f ms per cycle\n",
              cycles, cycles / kPolicyEvery, kWorkers, seconds, seconds * 1000 / cycles);
  EXPECT_TRUE(manager_->List().empty());
  ExpectNothingLeft(before, OwnNamePrefix());
}

TEST_F(SandboxLeakTest, ManagerDestructorDestroysEverything) {
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(CreateOrDie());
  manager_.reset();
  for (const auto& id : ids) EXPECT_TRUE(CgroupDirsWithPrefix(id).empty()) << id;
}

TEST_F(SandboxLeakTest, ReclaimRemovesWhatAKilledManagerLeft) {
  ASSERT_TRUE(NetPolicyManager::Shared().ok());
  ASSERT_TRUE(EnsureBpfPinRoot().ok());
  ASSERT_TRUE(manager_->Destroy(CreateOrDie()).ok());
  const HostState before;
  // A manager in another process with several live sandboxes, two of them
  // with --net policy (veth, BPF links), killed with SIGKILL.
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t manager_pid = fork();
  ASSERT_GE(manager_pid, 0);
  if (manager_pid == 0) {
    close(ready[0]);
    auto manager = Manager::Open();
    if (!manager.ok()) _exit(1);
    SandboxSpec policy;
    policy.net = NetMode::kPolicy;
    policy.allow.push_back(*ParseAllowRule("10.213.0.0/16:80"));
    for (int i = 0; i < 5; ++i) {
      auto id = (*manager)->Create(i < 2 ? policy : SandboxSpec());
      if (!id.ok()) _exit(2);
      ExecRequest request;
      request.argv = {"sleep", "60"};
      request.stdin_fd = request.stdout_fd = request.stderr_fd = -1;
      std::thread([m = manager->get(), id = *id, request] { (void)m->Exec(id, request); }).detach();
    }
    (void)!write(ready[1], "r", 1);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1) << "the other manager could not start its sandboxes";
  close(ready[0]);
  const std::string prefix = "fr-" + std::to_string(manager_pid) + "-";
  ASSERT_FALSE(CgroupDirsWithPrefix(prefix).empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(BpfLinks(), before.bpf_links + 2 * 5);  // five programs per policy sandbox
  kill(manager_pid, SIGKILL);
  waitpid(manager_pid, nullptr, 0);
  EXPECT_FALSE(CgroupDirsWithPrefix(prefix).empty());

  // The next manager to start reclaims them; ours is still alive, so its own stay.
  const std::string own = CreateOrDie();
  auto next = Manager::Open();
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_TRUE(CgroupDirsWithPrefix(prefix).empty());
  EXPECT_FALSE(CgroupDirsWithPrefix(own).empty());
  EXPECT_EQ(Run(own, {"true"}).exit_code, 0);
  ASSERT_TRUE(manager_->Destroy(own).ok());
  next->reset();
  ExpectNothingLeft(before, prefix);
}

// Host pids of the processes in a sandbox's cgroup v2 directory.
std::vector<pid_t> ProcessesOf(const std::string& id) {
  std::vector<pid_t> pids;
  std::istringstream procs(ReadHostFile("/sys/fs/cgroup/unified/flashroll/" + id + "/cgroup.procs"));
  for (pid_t pid; procs >> pid;) pids.push_back(pid);
  return pids;
}

// Kernel ids of the links pinned for sandbox `id`.
std::vector<uint32_t> PinnedLinkIds(const std::string& id) {
  std::vector<uint32_t> ids;
  for (const char* program : {"connect4", "connect6", "sendmsg4", "sendmsg6", "egress"}) {
    const int fd = bpf_obj_get((BpfPinDir(id) + "/" + program).c_str());
    if (fd < 0) continue;
    bpf_link_info info {};
    __u32 len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0) ids.push_back(info.id);
    close(fd);
  }
  return ids;
}

// How many programs are attached to the sandbox's cgroup for connect4.
__u32 ConnectProgramsOn(const std::string& id) {
  const std::string dir = "/sys/fs/cgroup/unified/flashroll/" + id;
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return 0;
  __u32 ids[8] = {};
  __u32 count = 8;
  __u32 flags = 0;
  if (bpf_prog_query(fd, BPF_CGROUP_INET4_CONNECT, 0, &flags, ids, &count) != 0) count = 0;
  close(fd);
  return count;
}

bool Alive(pid_t pid) {
  const std::string status = ReadHostFile("/proc/" + std::to_string(pid) + "/status");
  return !status.empty() && status.find("State:\tZ") == std::string::npos &&
         status.find("State:\tX") == std::string::npos;
}

TEST_F(SandboxLeakTest, ANewManagerRemovesEverythingOfAKilledOnesFrozenAndPolicedSandboxes) {
  ASSERT_TRUE(NetPolicyManager::Shared().ok());
  ASSERT_TRUE(EnsureBpfPinRoot().ok());  // mounts bpffs once, before taking stock
  ASSERT_TRUE(manager_->Destroy(CreateOrDie()).ok());
  const HostState before;
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t manager_pid = fork();
  ASSERT_GE(manager_pid, 0);
  if (manager_pid == 0) {
    // Sandboxes: frozen with --net policy, running with --net policy, plain.
    close(ready[0]);
    auto manager = Manager::Open();
    if (!manager.ok()) _exit(1);
    SandboxSpec policy;
    policy.net = NetMode::kPolicy;
    policy.allow.push_back(*ParseAllowRule("10.213.0.0/16:80"));
    std::string ids;
    for (const SandboxSpec& spec : {policy, policy, SandboxSpec()}) {
      auto id = (*manager)->Create(spec);
      if (!id.ok()) _exit(2);
      ExecRequest request;
      request.argv = {"/bin/sh", "-c", "sleep 1000 >/dev/null 2>&1 </dev/null &"};
      if (auto r = (*manager)->Exec(*id, request); !r.ok() || r->exit_code != 0) _exit(3);
      ids += *id + "\n";
    }
    if (!(*manager)->Freeze(ids.substr(0, ids.find('\n'))).ok()) _exit(4);
    (void)!write(ready[1], ids.data(), ids.size());
    pause();
    _exit(0);
  }
  close(ready[1]);
  char buf[512] = {};
  const ssize_t n = read(ready[0], buf, sizeof(buf) - 1);
  close(ready[0]);
  ASSERT_GT(n, 0) << "the other manager could not start its sandboxes";
  std::vector<std::string> ids;
  std::istringstream lines(std::string(buf, static_cast<size_t>(n)));
  for (std::string id; std::getline(lines, id);) ids.push_back(id);
  ASSERT_EQ(ids.size(), 3u);
  const std::string& frozen = ids[0];
  const std::string& policed = ids[1];
  std::vector<pid_t> pids;
  for (const auto& id : ids) {
    const auto of = ProcessesOf(id);
    EXPECT_GE(of.size(), 2u) << id;  // the init and the sleep
    pids.insert(pids.end(), of.begin(), of.end());
  }
  std::vector<uint32_t> links = PinnedLinkIds(frozen);
  const auto policed_links = PinnedLinkIds(policed);
  links.insert(links.end(), policed_links.begin(), policed_links.end());
  EXPECT_EQ(links.size(), 10u);

  kill(manager_pid, SIGKILL);
  waitpid(manager_pid, nullptr, 0);
  // The frozen sandbox lives on, and its policy with it (the pins hold the
  // links). Looked at soon: another manager starting on this host (a test
  // run in parallel) would reclaim it.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  for (pid_t pid : ProcessesOf(frozen)) EXPECT_TRUE(Alive(pid)) << pid;
  EXPECT_EQ(ProcessesOf(frozen).size(), 2u);
  EXPECT_EQ(ConnectProgramsOn(frozen), 1u) << "the frozen sandbox lost its network policy with its manager";

  auto next = Manager::Open();
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  const std::string prefix = "fr-" + std::to_string(manager_pid) + "-";
  EXPECT_TRUE(CgroupDirsWithPrefix(prefix).empty()) << ::testing::PrintToString(CgroupDirsWithPrefix(prefix));
  // Killed: a process leaves its cgroup early in its exit, so give the
  // last ones a moment to finish dying.
  for (pid_t pid : pids) {
    for (int i = 0; i < 200 && Alive(pid); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_FALSE(Alive(pid)) << "process " << pid << " of the killed manager's sandboxes";
  }
  for (const auto& id : ids) EXPECT_NE(access(BpfPinDir(id).c_str(), F_OK), 0) << BpfPinDir(id) << " is left";
  for (uint32_t id : links) {
    const int fd = bpf_link_get_fd_by_id(id);
    EXPECT_LT(fd, 0) << "BPF link " << id << " is left";
    if (fd >= 0) close(fd);
  }
  next->reset();
  ExpectNothingLeft(before, prefix);
}

TEST_F(SandboxLeakTest, DestroyRemovesThePinsOfAPolicedSandbox) {
  SandboxSpec policy;
  policy.net = NetMode::kPolicy;
  policy.allow.push_back(*ParseAllowRule("10.213.0.0/16:80"));
  const std::string id = CreateOrDie(policy);
  const auto links = PinnedLinkIds(id);
  EXPECT_EQ(links.size(), 5u);
  ASSERT_TRUE(manager_->Destroy(id).ok());
  EXPECT_NE(access(BpfPinDir(id).c_str(), F_OK), 0);
  for (uint32_t link : links) {
    const int fd = bpf_link_get_fd_by_id(link);
    EXPECT_LT(fd, 0) << "BPF link " << link << " is left";
    if (fd >= 0) close(fd);
  }
}

TEST_F(SandboxLeakTest, ReclaimRemovesAVethAKilledManagerLeftInTheHostNamespace) {
  // What a manager killed between creating the pair and starting the
  // sandbox leaves: a veth whose owner (pid 999999999) is long gone.
  auto veth = Veth::Create("fr-999999999-1-1");
  ASSERT_TRUE(veth.ok()) << veth.status().ToString();
  const std::string name = veth->host_name();
  ASSERT_EQ(ReadHostFile("/sys/class/net/" + name + "/ifalias"), "fr-999999999-1-1\n");
  auto next = Manager::Open();
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_NE(access(("/sys/class/net/" + name).c_str(), F_OK), 0) << name << " was not reclaimed";
  EXPECT_TRUE(veth->Remove().ok());  // already gone: fine
}

}  // namespace
}  // namespace flashroll::sandbox
