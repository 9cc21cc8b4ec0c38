// Kept sandboxes (sandbox/kept.h): with Options::keep_sandboxes a sandbox
// outlives its manager, stopped or SIGKILLed, and the next manager adopts
// it with its processes and files; another manager's start-up reclaim
// leaves it alone; one nobody adopts ends at its orphan timeout or TTL.
// Needs root (skips otherwise).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "sandbox/bpf_pins.h"
#include "sandbox/kept.h"
#include "sandbox/sandbox.h"

namespace flashroll::sandbox {
namespace {

using std::chrono::milliseconds;
namespace fs = std::filesystem;

bool InitRuns(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::stringstream status;
  status << in.rdbuf();
  const std::string text = status.str();
  return !text.empty() && text.find("State:\tZ") == std::string::npos && text.find("State:\tX") == std::string::npos;
}

bool WaitInitDead(pid_t pid, milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (InitRuns(pid)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return true;
}

// Whether any cgroup directory of sandbox `id` exists.
bool KeptCgroupsLeft(const std::string& id) {
  for (const auto& hierarchy : fs::directory_iterator("/sys/fs/cgroup")) {
    std::error_code error;
    if (fs::exists(hierarchy.path() / "flashroll" / id, error)) return true;
  }
  return false;
}

Manager::Options KeptOptions(milliseconds orphan_timeout = std::chrono::minutes(5)) {
  Manager::Options options;
  options.keep_sandboxes = true;
  options.orphan_timeout = orphan_timeout;
  return options;
}

std::unique_ptr<Manager> OpenManagerOrDie(const Manager::Options& options) {
  auto manager = Manager::Open(options);
  EXPECT_TRUE(manager.ok()) << manager.status().ToString();
  return manager.ok() ? std::move(*manager) : nullptr;
}

ExecResult KeptSh(Manager& manager, const std::string& id, const std::string& script) {
  ExecRequest request;
  request.argv = {"/bin/sh", "-c", script};
  request.timeout = milliseconds(20000);
  auto result = manager.Exec(id, request);
  EXPECT_TRUE(result.ok()) << result.status().ToString();
  return result.ok() ? *result : ExecResult();
}

class KeptSandboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "kept sandboxes need root";
  }
};

// A manager that stops leaves its kept sandbox running; a plain manager
// opened meanwhile (start-up reclaim on) leaves it alone; the next keeping
// manager adopts it with its files and background process, drives it, and
// destroys it leaving nothing.
TEST_F(KeptSandboxTest, AStoppedManagersSandboxIsAdoptedWithItsProcessesAndFiles) {
  auto first = OpenManagerOrDie(KeptOptions());
  ASSERT_NE(first, nullptr);
  SandboxSpec spec;
  spec.memory_bytes = 256ull << 20;
  auto id = first->Create(spec);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(KeptSh(*first, *id, "echo kept > /tmp/state; sleep 1000 >/dev/null 2>&1 </dev/null & echo $!").exit_code, 0);
  const pid_t init = first->Info(*id)->init_pid;
  first.reset();

  std::this_thread::sleep_for(milliseconds(200));
  EXPECT_TRUE(InitRuns(init)) << "the kept sandbox ended with its manager";
  EXPECT_TRUE(fs::exists(KeptRecordPath(*id)));
  auto plain = OpenManagerOrDie(Manager::Options());  // reclaims what dead managers left
  ASSERT_NE(plain, nullptr);
  plain.reset();
  EXPECT_TRUE(InitRuns(init)) << "a manager's start-up reclaim killed a kept sandbox";
  EXPECT_TRUE(KeptCgroupsLeft(*id));

  auto next = OpenManagerOrDie(KeptOptions());
  ASSERT_NE(next, nullptr);
  bool listed = false;
  for (const auto& [orphan, annotation] : next->Orphans()) listed |= orphan == *id;
  EXPECT_TRUE(listed);
  ASSERT_TRUE(next->Adopt(*id, spec).ok());
  for (const auto& [orphan, annotation] : next->Orphans()) EXPECT_NE(orphan, *id);
  EXPECT_EQ(KeptSh(*next, *id, "cat /tmp/state; pgrep -c sleep").stdout_data, "kept\n1\n");
  ASSERT_TRUE(next->Freeze(*id).ok());
  ASSERT_TRUE(next->Thaw(*id).ok());
  EXPECT_EQ(KeptSh(*next, *id, "echo again").stdout_data, "again\n");
  EXPECT_EQ(next->Info(*id)->init_pid, init);
  ASSERT_TRUE(next->Destroy(*id).ok());
  EXPECT_TRUE(WaitInitDead(init, milliseconds(5000)));
  EXPECT_FALSE(KeptCgroupsLeft(*id));
  EXPECT_FALSE(fs::exists(KeptRecordPath(*id)));
  EXPECT_FALSE(fs::exists(KeptSocketPath(*id)));
}

// SIGKILL of a manager between two execs: the sandbox runs on, and the
// next manager's execs, signals and policy work on it.
TEST_F(KeptSandboxTest, ASigkilledManagersPolicedSandboxIsAdopted) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t manager_pid = ::fork();
  ASSERT_GE(manager_pid, 0);
  if (manager_pid == 0) {
    ::close(ready[0]);
    auto manager = Manager::Open(KeptOptions());
    if (!manager.ok()) _exit(1);
    SandboxSpec policed;
    policed.net = NetMode::kPolicy;
    policed.allow.push_back(*ParseAllowRule("10.213.0.0/16:80"));
    auto id = (*manager)->Create(policed);
    if (!id.ok()) _exit(2);
    ExecRequest request;
    request.argv = {"/bin/sh", "-c", "echo before > /tmp/state"};
    if (auto r = (*manager)->Exec(*id, request); !r.ok() || r->exit_code != 0) _exit(3);
    (void)!::write(ready[1], id->data(), id->size());
    ::pause();
    _exit(0);
  }
  ::close(ready[1]);
  char buf[128] = {};
  const ssize_t n = ::read(ready[0], buf, sizeof(buf) - 1);
  ::close(ready[0]);
  ASSERT_GT(n, 0) << "the first manager could not start its sandbox";
  const std::string id(buf, static_cast<size_t>(n));
  ::kill(manager_pid, SIGKILL);
  ::waitpid(manager_pid, nullptr, 0);

  auto next = OpenManagerOrDie(KeptOptions());
  ASSERT_NE(next, nullptr);
  SandboxSpec policed;
  policed.net = NetMode::kPolicy;
  policed.allow.push_back(*ParseAllowRule("10.213.0.0/16:80"));
  ASSERT_TRUE(next->Adopt(id, policed).ok());
  EXPECT_FALSE(next->Info(id)->host_address.empty());
  EXPECT_EQ(KeptSh(*next, id, "cat /tmp/state").stdout_data, "before\n");
  // The policy still holds: nothing but 10.213.0.0/16:80 is reachable.
  EXPECT_NE(KeptSh(*next, id, "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), 2)\"").exit_code, 0);
  // A signal reaches this manager's exec, not a command of the first's.
  std::thread signaller([&] {
    std::this_thread::sleep_for(milliseconds(300));
    EXPECT_TRUE(next->Signal(id, SIGTERM).ok());
  });
  ExecResult slept = KeptSh(*next, id, "exec sleep 30");
  signaller.join();
  EXPECT_EQ(slept.signal, SIGTERM);
  const pid_t init = next->Info(id)->init_pid;
  ASSERT_TRUE(next->Destroy(id).ok());
  EXPECT_TRUE(WaitInitDead(init, milliseconds(5000)));
  EXPECT_FALSE(KeptCgroupsLeft(id));
  EXPECT_FALSE(fs::exists(BpfPinDir(id)));
}

// A sandbox of `spec` made by a manager in a child process, which then
// stops (its manager's destructor runs, then it exits): "" on failure.
std::string CreateInStoppedManager(const Manager::Options& options, const SandboxSpec& spec) {
  int ready[2];
  if (::pipe(ready) != 0) return "";
  const pid_t child = ::fork();
  if (child < 0) return "";
  if (child == 0) {
    ::close(ready[0]);
    auto manager = Manager::Open(options);
    if (!manager.ok()) _exit(1);
    auto id = (*manager)->Create(spec);
    if (!id.ok()) _exit(2);
    manager->reset();
    (void)!::write(ready[1], id->data(), id->size());
    _exit(0);
  }
  ::close(ready[1]);
  char buf[128] = {};
  const ssize_t n = ::read(ready[0], buf, sizeof(buf) - 1);
  ::close(ready[0]);
  ::waitpid(child, nullptr, 0);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

// Nobody adopts it: it ends at its orphan timeout (or at its TTL, when
// that comes first), and the next manager's start-up reclaims the rest.
TEST_F(KeptSandboxTest, AnOrphanEndsAtItsOrphanTimeoutOrTtl) {
  const std::string timed_out = CreateInStoppedManager(KeptOptions(milliseconds(600)), SandboxSpec());
  ASSERT_FALSE(timed_out.empty());
  auto record = ReadKeptRecord(timed_out);
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_TRUE(KeptInitLives(*record));
  EXPECT_TRUE(WaitInitDead(record->init_pid, milliseconds(5000))) << "an orphan outlived its orphan timeout";
  SandboxSpec ttl;
  ttl.ttl = std::chrono::seconds(1);
  const std::string expiring = CreateInStoppedManager(KeptOptions(std::chrono::hours(1)), ttl);
  ASSERT_FALSE(expiring.empty());
  auto ttl_record = ReadKeptRecord(expiring);
  ASSERT_TRUE(ttl_record.ok()) << ttl_record.status().ToString();
  EXPECT_TRUE(WaitInitDead(ttl_record->init_pid, milliseconds(5000))) << "an orphan outlived its TTL";

  auto next = OpenManagerOrDie(Manager::Options());
  ASSERT_NE(next, nullptr);
  for (const std::string& id : {timed_out, expiring}) {
    EXPECT_FALSE(KeptCgroupsLeft(id)) << id;
    EXPECT_FALSE(fs::exists(KeptRecordPath(id))) << id;
    EXPECT_FALSE(fs::exists(KeptSocketPath(id))) << id;
  }
}

// A live manager's kept sandbox is not an orphan: another manager neither
// lists nor adopts it. Nor can the sandbox reach where managers connect.
TEST_F(KeptSandboxTest, ALiveManagersSandboxIsNoOneElsesAndCannotReachItsSocket) {
  auto holder = OpenManagerOrDie(KeptOptions());
  ASSERT_NE(holder, nullptr);
  auto id = holder->Create(SandboxSpec());
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  auto other = OpenManagerOrDie(KeptOptions());
  ASSERT_NE(other, nullptr);
  for (const auto& [orphan, annotation] : other->Orphans()) EXPECT_NE(orphan, *id);
  EXPECT_EQ(other->Adopt(*id, SandboxSpec()).code(), Code::kFailedPrecondition);
  EXPECT_EQ(other->DiscardOrphan(*id).code(), Code::kFailedPrecondition);
  // Inside, as its root: no /run/flashroll/kept, and the init's listening
  // socket and range lock (fds 4 and 5) cannot be had through /proc (the
  // init is not dumpable) to take the next manager's connection.
  ExecResult probe = KeptSh(*holder, *id,
                            "ls /run/flashroll/kept >/dev/null 2>&1 && echo listed; "
                            "readlink /proc/1/fd/4 && echo link; cat /proc/1/fd/5 >/dev/null 2>&1 && echo opened; "
                            "python3 -c \"import os; os.open('/proc/1/fd/4', os.O_RDONLY)\" 2>/dev/null && echo socket; "
                            "echo done");
  EXPECT_EQ(probe.stdout_data, "done\n") << probe.stderr_data;
  ASSERT_TRUE(holder->Annotate(*id, "owner's note").ok());
  EXPECT_EQ(ReadKeptRecord(*id)->annotation, "owner's note");
  ASSERT_TRUE(holder->Destroy(*id).ok());
}

// An owner that no longer knows an orphan ends it.
TEST_F(KeptSandboxTest, ADiscardedOrphanLeavesNothing) {
  auto first = OpenManagerOrDie(KeptOptions());
  ASSERT_NE(first, nullptr);
  auto id = first->Create(SandboxSpec());
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  const pid_t init = first->Info(*id)->init_pid;
  first.reset();
  auto next = OpenManagerOrDie(KeptOptions());
  ASSERT_NE(next, nullptr);
  ASSERT_TRUE(next->DiscardOrphan(*id).ok());
  EXPECT_TRUE(WaitInitDead(init, milliseconds(5000)));
  EXPECT_FALSE(KeptCgroupsLeft(*id));
  EXPECT_FALSE(fs::exists(KeptRecordPath(*id)));
  EXPECT_EQ(next->Adopt(*id, SandboxSpec()).code(), Code::kNotFound);
}

TEST_F(KeptSandboxTest, KeepingNeedsAPositiveOrphanTimeout) {
  EXPECT_EQ(Manager::Open(KeptOptions(milliseconds(0))).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace flashroll::sandbox
