// Start-up reclaim goes on past a leftover it cannot remove yet, and the
// manager hands that one to its reaper instead of failing to open; each
// manager's liveness is looked up once. (What reclaim removes is checked
// end to end in leak_test.cc.)
#include "sandbox/reclaim.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

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
  Result<std::unique_ptr<Cgroup>> Adopt(const std::string&) override { return Status::Unimplemented("fake"); }
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
  // The reaper counts the teardown done just after the directory goes.
  for (int i = 0; i < 200 && (*manager)->teardown_stats().pending != 0; ++i) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_EQ((*manager)->teardown_stats().pending, 0u);
}

class ListingBackend : public CgroupBackend {
 public:
  explicit ListingBackend(std::vector<std::string> names) : names_(std::move(names)) {}
  const char* layout() const override { return "fake"; }
  Result<std::unique_ptr<Cgroup>> Create(const std::string&, const CgroupLimits&) override {
    return Status::Unimplemented("fake");
  }
  Result<std::unique_ptr<Cgroup>> Adopt(const std::string&) override { return Status::Unimplemented("fake"); }
  Result<std::vector<std::string>> List() override { return names_; }
  Status RemoveLeftover(const std::string& name) override {
    removed.push_back(name);
    return Status::Ok();
  }
  std::vector<std::string> removed;

 private:
  std::vector<std::string> names_;
};

// 1,000 sandboxes of a live manager and two of a dead one: two lookups,
// the dead one's two sandboxes removed.
TEST(ReclaimTest, LooksUpEachManagerOnce) {
  std::vector<std::string> names;
  for (int i = 1; i <= 1000; ++i) names.push_back("fr-100-5000-" + std::to_string(i));
  names.push_back("fr-200-6000-1");
  names.push_back("fr-200-6000-2");
  ListingBackend backend(names);
  std::vector<std::string> asked;
  auto removed = TEST_ReclaimLeftovers(backend, [&asked](const std::string& name) {
    asked.push_back(name);
    return name.rfind("fr-100-5000-", 0) == 0;
  });
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  // Reclaim also lists the host's real BPF pins: only the fake managers count.
  const auto fake = [](const std::string& name) { return name.rfind("fr-100-", 0) == 0 || name.rfind("fr-200-", 0) == 0; };
  EXPECT_EQ(std::count_if(asked.begin(), asked.end(), fake), 2);
  std::vector<std::string> fake_removed;
  std::copy_if(backend.removed.begin(), backend.removed.end(), std::back_inserter(fake_removed), fake);
  EXPECT_EQ(fake_removed, (std::vector<std::string>{"fr-200-6000-1", "fr-200-6000-2"}));
}

}  // namespace
}  // namespace flashroll::sandbox
