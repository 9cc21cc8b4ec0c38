// Start-up reclaim goes on past a leftover it cannot remove yet, and the
// manager hands that one to its reaper instead of failing to open. (What
// reclaim removes is checked end to end in leak_test.cc.)
#include "sandbox/reclaim.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "sandbox/bpf_pins.h"
#include "sandbox/sandbox.h"

namespace flashroll::sandbox {
namespace {

using std::chrono::milliseconds;

// Names of a manager that cannot be running (no such pid).
constexpr char kStuck[] = "fr-999999999-1-1";
constexpr char kGone[] = "fr-999999999-1-2";

class FakeBackend : public CgroupBackend {
 public:
  const char* layout() const override { return "fake"; }
  Result<std::unique_ptr<Cgroup>> Create(const std::string&, const CgroupLimits&) override {
    return Status::Unimplemented("fake");
  }
  Result<std::vector<std::string>> List() override { return std::vector<std::string>{kStuck, kGone}; }
  Status RemoveLeftover(const std::string& name) override {
    removed.push_back(name);
    if (name == kStuck) return Status::DeadlineExceeded("/sys/fs/cgroup/x: processes still running after kill");
    return Status::Ok();
  }
  std::vector<std::string> removed;
};

TEST(ReclaimTest, GoesOnPastALeftoverItCannotRemoveAndSaysWhich) {
  if (geteuid() != 0) GTEST_SKIP() << "reclaim needs root";
  FakeBackend backend;
  auto reclaimed = ReclaimLeftovers(backend);
  ASSERT_TRUE(reclaimed.ok()) << reclaimed.status().ToString();
  EXPECT_NE(std::find(backend.removed.begin(), backend.removed.end(), kGone), backend.removed.end());
  EXPECT_NE(std::find(reclaimed->removed.begin(), reclaimed->removed.end(), kGone), reclaimed->removed.end());
  bool stuck_reported = false;
  for (const auto& [name, status] : reclaimed->failed) {
    if (name != kStuck) continue;
    stuck_reported = true;
    EXPECT_EQ(status.code(), Code::kDeadlineExceeded);
    EXPECT_NE(status.message().find("reclaim fr-999999999-1-1"), std::string::npos) << status.ToString();
  }
  EXPECT_TRUE(stuck_reported);
}

TEST(ReclaimTest, AManagerOpensPastAStuckLeftoverAndItsReaperFinishesIt) {
  if (geteuid() != 0) GTEST_SKIP() << "reclaim needs root";
  ASSERT_TRUE(EnsureBpfPinRoot().ok());
  // A dead manager's pin directory that cannot be removed yet: it holds a
  // directory, which unlink refuses.
  const std::string dir = BpfPinDir("fr-999999999-7-7");
  const std::string stuck = dir + "/stuck";
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(mkdir(stuck.c_str(), 0700), 0);
  Manager::Options options;
  options.reaper.first_backoff = milliseconds(20);
  options.reaper.max_backoff = milliseconds(50);
  auto manager = Manager::Open(options);
  if (!manager.ok()) {
    rmdir(stuck.c_str());
    rmdir(dir.c_str());
  }
  ASSERT_TRUE(manager.ok()) << manager.status().ToString();
  EXPECT_GE((*manager)->teardown_stats().failed_attempts, 1u);
  EXPECT_EQ(access(dir.c_str(), F_OK), 0);
  ASSERT_EQ(rmdir(stuck.c_str()), 0);
  for (int i = 0; i < 200 && access(dir.c_str(), F_OK) == 0; ++i) std::this_thread::sleep_for(milliseconds(10));
  EXPECT_NE(access(dir.c_str(), F_OK), 0) << dir << " was not reclaimed once it could be";
  EXPECT_EQ((*manager)->teardown_stats().pending, 0u);
}

}  // namespace
}  // namespace flashroll::sandbox
