// The cgroup backend on this machine's layout (root only).
#include "sandbox/cgroup.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>

#include "sandbox/naming.h"
#include "tests/sandbox/sandbox_fixture.h"

namespace flashroll::sandbox {
namespace {

class SandboxCgroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "cgroup tests need root";
    auto backend = OpenCgroupBackend();
    ASSERT_TRUE(backend.ok()) << backend.status().ToString();
    backend_ = std::move(*backend);
  }
  std::unique_ptr<CgroupBackend> backend_;
};

TEST_F(SandboxCgroupTest, CreateAppliesLimitsAndRemoveCleansUp) {
  const std::string name = NewSandboxName();
  CgroupLimits limits;
  limits.memory_bytes = 32 << 20;
  limits.pids = 9;
  limits.cpus = 0.25;
  auto cgroup = backend_->Create(name, limits);
  ASSERT_TRUE(cgroup.ok()) << cgroup.status().ToString();
  EXPECT_GE((*cgroup)->clone_into_fd(), 0);
  if (std::string(backend_->layout()) == "hybrid") {
    EXPECT_EQ(ReadHostFile("/sys/fs/cgroup/memory/flashroll/" + name + "/memory.limit_in_bytes"),
              std::to_string(32 << 20) + "\n");
    // With swap accounting, memory+swap has the same bound: swap cannot extend the limit.
    const std::string memsw = "/sys/fs/cgroup/memory/flashroll/" + name + "/memory.memsw.limit_in_bytes";
    if (::access(memsw.c_str(), F_OK) == 0) {
      EXPECT_EQ(ReadHostFile(memsw), std::to_string(32 << 20) + "\n");
    }
    EXPECT_EQ(ReadHostFile("/sys/fs/cgroup/pids/flashroll/" + name + "/pids.max"), "9\n");
    EXPECT_EQ(ReadHostFile("/sys/fs/cgroup/cpu/flashroll/" + name + "/cpu.cfs_quota_us"), "25000\n");
    CgroupLimits more;
    more.pids = 20;
    ASSERT_TRUE((*cgroup)->ApplyLimits(more).ok());
    EXPECT_EQ(ReadHostFile("/sys/fs/cgroup/pids/flashroll/" + name + "/pids.max"), "20\n");
  }
  auto oom = (*cgroup)->OomKillCount();
  ASSERT_TRUE(oom.ok()) << oom.status().ToString();
  EXPECT_EQ(*oom, 0u);
  EXPECT_TRUE((*cgroup)->SetFrozen(true).ok());
  EXPECT_TRUE((*cgroup)->SetFrozen(false).ok());
  auto names = backend_->List();
  ASSERT_TRUE(names.ok());
  EXPECT_NE(std::find(names->begin(), names->end(), name), names->end());
  EXPECT_EQ(backend_->Create(name, CgroupLimits()).status().code(), Code::kAlreadyExists);
  ASSERT_TRUE((*cgroup)->Remove().ok());
  EXPECT_TRUE(CgroupDirsWithPrefix(name).empty());
}

// A v1 hierarchy is joined only for its limit (memory always); one asked
// for every hierarchy (the warm pool's) takes any limit later.
TEST_F(SandboxCgroupTest, JoinsOnlyTheHierarchiesOfItsLimits) {
  if (std::string(backend_->layout()) != "hybrid") GTEST_SKIP() << "v1 hierarchies only in the hybrid layout";
  auto exists = [](const std::string& controller, const std::string& name) {
    return ::access(("/sys/fs/cgroup/" + controller + "/flashroll/" + name).c_str(), F_OK) == 0;
  };
  const std::string name = NewSandboxName();
  CgroupLimits limits;
  limits.pids = 9;
  auto cgroup = backend_->Create(name, limits);
  ASSERT_TRUE(cgroup.ok()) << cgroup.status().ToString();
  EXPECT_TRUE(exists("memory", name));
  EXPECT_TRUE(exists("pids", name));
  EXPECT_FALSE(exists("cpu", name));
  EXPECT_FALSE(exists("cpuset", name));
  CgroupLimits cpus;
  cpus.cpus = 0.5;
  EXPECT_EQ((*cgroup)->ApplyLimits(cpus).code(), Code::kFailedPrecondition);
  ASSERT_TRUE((*cgroup)->Remove().ok());

  const std::string pooled = NewSandboxName();
  CgroupLimits every;
  every.every_hierarchy = true;
  auto all = backend_->Create(pooled, every);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  for (const char* controller : {"memory", "pids", "cpu", "cpuset"}) EXPECT_TRUE(exists(controller, pooled));
  CgroupLimits later;
  later.cpus = 0.5;
  later.cpuset = "0";
  EXPECT_TRUE((*all)->ApplyLimits(later).ok());
  EXPECT_EQ(ReadHostFile("/sys/fs/cgroup/cpuset/flashroll/" + pooled + "/cpuset.cpus"), "0\n");
  EXPECT_EQ(ReadHostFile("/sys/fs/cgroup/cpu/flashroll/" + pooled + "/cpu.cfs_quota_us"), "50000\n");
  ASSERT_TRUE((*all)->Remove().ok());
  EXPECT_TRUE(CgroupDirsWithPrefix(pooled).empty());
}

TEST_F(SandboxCgroupTest, DestructorRemovesAndLeftoversAreReclaimable) {
  const std::string name = NewSandboxName();
  { ASSERT_TRUE(backend_->Create(name, CgroupLimits()).ok()); }
  EXPECT_TRUE(CgroupDirsWithPrefix(name).empty());
  // A cgroup whose owner object is gone (as after a crash) is removed by RemoveLeftover.
  const std::string leftover = NewSandboxName();
  auto cgroup = backend_->Create(leftover, CgroupLimits());
  ASSERT_TRUE(cgroup.ok());
  ASSERT_TRUE(backend_->RemoveLeftover(leftover).ok());
  EXPECT_TRUE(CgroupDirsWithPrefix(leftover).empty());
  EXPECT_TRUE(backend_->RemoveLeftover(leftover).ok());  // idempotent
}

}  // namespace
}  // namespace flashroll::sandbox
