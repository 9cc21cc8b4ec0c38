// What a manager holds per idle sandbox, and the descriptor limit it runs
// under: 10,000 idle sandboxes need both (BENCHMARKS.md, idle density).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "sandbox/sandbox.h"

namespace flashroll::sandbox {
namespace {

size_t OpenDescriptors() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

TEST(ManagerDescriptorsTest, OpenRaisesTheSoftLimitToTheHardLimit) {
  rlimit saved {};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  if (saved.rlim_max <= 256) GTEST_SKIP() << "hard limit too low to lower the soft one";
  rlimit low = saved;
  low.rlim_cur = 256;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  Manager::Options options;
  options.reclaim_leftovers = false;
  options.netns_pool = 0;
  auto manager = Manager::Open(options);
  ASSERT_TRUE(manager.ok()) << manager.status().ToString();
  rlimit now {};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &now), 0);
  EXPECT_EQ(now.rlim_cur, saved.rlim_max);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
}

// An idle sandbox holds its init's pidfd and control socket, its id
// range's lock (a root manager) and, with the crash watcher, its OOM
// notifier: nothing the launch alone needed.
TEST(ManagerDescriptorsTest, AnIdleSandboxHoldsFourDescriptors) {
  if (::geteuid() != 0) GTEST_SKIP() << "sandbox tests need root";
  Manager::Options options;
  options.netns_pool = 0;  // its namespaces would be counted as they fill
  auto manager = Manager::Open(options);
  ASSERT_TRUE(manager.ok()) << manager.status().ToString();
  // The first create opens what the process keeps for every launch (the
  // init binary's memfd).
  auto first = (*manager)->Create(SandboxSpec());
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE((*manager)->Destroy(*first).ok());
  constexpr size_t kSandboxes = 8;
  const size_t before = OpenDescriptors();
  std::vector<std::string> ids;
  for (size_t i = 0; i < kSandboxes; ++i) {
    auto id = (*manager)->Create(SandboxSpec());
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    ids.push_back(*id);
  }
  EXPECT_EQ(OpenDescriptors() - before, 4 * kSandboxes);
  for (const auto& id : ids) EXPECT_TRUE((*manager)->Destroy(id).ok());
  EXPECT_EQ(OpenDescriptors(), before);
}

}  // namespace
}  // namespace flashroll::sandbox
