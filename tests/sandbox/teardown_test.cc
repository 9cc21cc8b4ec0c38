// A sandbox whose teardown hangs (one of its processes in uninterruptible
// sleep, made with a cgroup v1 freezer: SIGKILL cannot end a task frozen
// there, so its pid namespace's init is never reaped) is out of service at
// once, is retried by the reaper and reported, and never delays the TTL
// expiry or the crash handling of other sandboxes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <thread>

#include "tests/sandbox/sandbox_fixture.h"

namespace flashroll::sandbox {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr char kFreezerRoot[] = "/sys/fs/cgroup/freezer";

bool WriteFile(const std::string& path, const std::string& value) {
  std::ofstream out(path);
  out << value;
  out.flush();
  return static_cast<bool>(out);
}

// A cgroup v1 freezer directory of the test's own: tasks moved in and
// frozen sleep uninterruptibly, even through SIGKILL, until thawed.
class V1Freezer {
 public:
  V1Freezer() : dir_(std::string(kFreezerRoot) + "/frtest-" + std::to_string(getpid()) + "-" + std::to_string(next_++)) {
    available_ = mkdir(dir_.c_str(), 0755) == 0;
  }
  ~V1Freezer() {
    Thaw();
    for (int i = 0; i < 200 && rmdir(dir_.c_str()) != 0 && errno == EBUSY; ++i) {
      std::this_thread::sleep_for(milliseconds(10));
    }
  }
  bool available() const { return available_; }
  bool Add(pid_t pid) { return WriteFile(dir_ + "/cgroup.procs", std::to_string(pid)); }
  bool Freeze() {
    if (!WriteFile(dir_ + "/freezer.state", "FROZEN")) return false;
    for (int i = 0; i < 200; ++i) {
      if (ReadHostFile(dir_ + "/freezer.state") == "FROZEN\n") return true;
      std::this_thread::sleep_for(milliseconds(5));
    }
    return false;
  }
  void Thaw() { (void)WriteFile(dir_ + "/freezer.state", "THAWED"); }

 private:
  static inline std::atomic<int> next_{0};
  std::string dir_;
  bool available_ = false;
};

bool WaitUntil(const std::function<bool()>& done, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return true;
}

bool Listed(Manager& manager, const std::string& id) {
  for (const auto& listed : manager.List()) {
    if (listed == id) return true;
  }
  return false;
}

// True when the sandbox's events include one of `kind`.
bool HasEvent(Manager& manager, const std::string& id, EventKind kind) {
  auto page = manager.EventsSince(id, 0);
  if (!page.ok()) return false;
  for (const auto& event : page->events) {
    if (event.kind == kind) return true;
  }
  return false;
}

class TeardownTest : public SandboxFixture {
 protected:
  void SetUp() override {
    SandboxFixture::SetUp();
    if (IsSkipped()) return;
    if (!freezer_.available()) GTEST_SKIP() << "no cgroup v1 freezer at " << kFreezerRoot;
    Manager::Options options;
    options.teardown_timeout = milliseconds(300);
    options.reaper.first_backoff = milliseconds(50);
    options.reaper.max_backoff = milliseconds(200);
    auto manager = Manager::Open(options);
    ASSERT_TRUE(manager.ok()) << manager.status().ToString();
    manager_ = std::move(*manager);
  }

  // Creates a sandbox with a background process frozen in the v1 freezer:
  // its teardown cannot finish until the freezer thaws.
  std::string CreateHung(const SandboxSpec& spec = SandboxSpec()) {
    const std::string id = CreateOrDie(spec);
    EXPECT_EQ(Sh(id, "sleep 1000 >/dev/null 2>&1 </dev/null &").exit_code, 0);
    auto info = manager_->Info(id);
    EXPECT_TRUE(info.ok());
    pid_t sleeper = -1;
    for (int i = 0; i < 200 && sleeper < 0; ++i) {
      std::istringstream procs(ReadHostFile("/sys/fs/cgroup/unified/flashroll/" + id + "/cgroup.procs"));
      for (pid_t pid; procs >> pid;) {
        if (pid != info->init_pid && ReadHostFile("/proc/" + std::to_string(pid) + "/comm") == "sleep\n") sleeper = pid;
      }
      if (sleeper < 0) std::this_thread::sleep_for(milliseconds(5));
    }
    EXPECT_GT(sleeper, 0) << "the background sleep of " << id << " did not show up";
    EXPECT_TRUE(freezer_.Add(sleeper));
    EXPECT_TRUE(freezer_.Freeze());
    return id;
  }

  V1Freezer freezer_;
};

TEST_F(TeardownTest, AHungSandboxDoesNotDelayTheTtlOfOthers) {
  SandboxSpec hung_spec;
  hung_spec.ttl = milliseconds(100);
  const std::string hung = CreateHung(hung_spec);
  ASSERT_TRUE(WaitUntil([&] { return !Listed(*manager_, hung); }, milliseconds(3000)));
  SandboxSpec spec;
  spec.ttl = milliseconds(200);
  const auto created = Clock::now();
  const std::string other = CreateOrDie(spec);
  const bool reclaimed = WaitUntil(
      [&] { return !Listed(*manager_, other) && CgroupDirsWithPrefix(other).empty(); }, milliseconds(3000));
  const auto took = Clock::now() - created;
  // While the hung one's teardown still fails and is retried.
  EXPECT_FALSE(CgroupDirsWithPrefix(hung).empty());
  freezer_.Thaw();
  EXPECT_TRUE(reclaimed) << "the short-TTL sandbox was not reclaimed while another's teardown hung";
  EXPECT_LT(took, milliseconds(2000));
  EXPECT_TRUE(HasEvent(*manager_, other, EventKind::kDestroyed));
  // Once thawed, the reaper finishes the hung one: nothing of it is left.
  EXPECT_TRUE(WaitUntil([&] { return CgroupDirsWithPrefix(hung).empty(); }, milliseconds(5000)));
  EXPECT_TRUE(HasEvent(*manager_, hung, EventKind::kTeardownFailed));
  EXPECT_TRUE(WaitUntil([&] { return HasEvent(*manager_, hung, EventKind::kDestroyed); }, milliseconds(2000)));
  const auto stats = manager_->teardown_stats();
  EXPECT_GE(stats.failed_attempts, 1u);
  EXPECT_GE(stats.finished, 1u);
  EXPECT_EQ(stats.pending, 0u);
}

TEST_F(TeardownTest, AHungSandboxDoesNotStallTheCrashWatcherForOthers) {
  const std::string hung = CreateHung();
  const std::string other = CreateOrDie();
  auto hung_info = manager_->Info(hung);
  auto other_info = manager_->Info(other);
  ASSERT_TRUE(hung_info.ok() && other_info.ok());
  // The hung sandbox's init dies; its crash handling starts a teardown that
  // cannot finish.
  ASSERT_EQ(kill(hung_info->init_pid, SIGKILL), 0);
  ASSERT_TRUE(WaitUntil([&] { return HasEvent(*manager_, hung, EventKind::kInitExit); }, milliseconds(3000)));
  std::this_thread::sleep_for(milliseconds(50));
  ASSERT_EQ(kill(other_info->init_pid, SIGKILL), 0);
  const bool seen = WaitUntil([&] { return HasEvent(*manager_, other, EventKind::kInitExit); }, milliseconds(3000));
  const bool destroyed = WaitUntil(
      [&] { return HasEvent(*manager_, other, EventKind::kDestroyed) && CgroupDirsWithPrefix(other).empty(); },
      milliseconds(3000));
  EXPECT_FALSE(CgroupDirsWithPrefix(hung).empty());
  freezer_.Thaw();
  EXPECT_TRUE(seen) << "the crash watcher did not report the second sandbox's init exit";
  EXPECT_TRUE(destroyed) << "the second sandbox was not torn down";
  EXPECT_TRUE(WaitUntil([&] { return CgroupDirsWithPrefix(hung).empty(); }, milliseconds(5000)));
}

TEST_F(TeardownTest, DestroyOfAHungSandboxReturnsTakesItOutOfServiceAndTheReaperFinishesIt) {
  const std::string hung = CreateHung();
  auto destroy = std::async(std::launch::async, [&] { return manager_->Destroy(hung); });
  const bool returned = destroy.wait_for(std::chrono::seconds(3)) == std::future_status::ready;
  if (!returned) freezer_.Thaw();  // unblocks a Destroy that waits for ever
  ASSERT_TRUE(returned) << "Destroy waited for a hung teardown";
  const Status status = destroy.get();
  EXPECT_EQ(status.code(), Code::kDeadlineExceeded) << status.ToString();
  EXPECT_NE(status.message().find("not reaped"), std::string::npos) << status.ToString();
  EXPECT_FALSE(Listed(*manager_, hung));
  EXPECT_EQ(manager_->Info(hung).status().code(), Code::kNotFound);
  EXPECT_EQ(manager_->Destroy(hung).code(), Code::kNotFound);
  ASSERT_TRUE(WaitUntil([&] { return HasEvent(*manager_, hung, EventKind::kTeardownFailed); }, milliseconds(2000)));
  EXPECT_GE(manager_->teardown_stats().pending, 1u);
  EXPECT_FALSE(CgroupDirsWithPrefix(hung).empty());
  freezer_.Thaw();
  EXPECT_TRUE(WaitUntil([&] { return CgroupDirsWithPrefix(hung).empty(); }, milliseconds(5000)));
  EXPECT_TRUE(WaitUntil([&] { return HasEvent(*manager_, hung, EventKind::kDestroyed); }, milliseconds(2000)));
  auto page = manager_->EventsSince(hung, 0);
  ASSERT_TRUE(page.ok());
  EXPECT_TRUE(page->closed);
  EXPECT_EQ(manager_->teardown_stats().pending, 0u);
}

}  // namespace
}  // namespace flashroll::sandbox
