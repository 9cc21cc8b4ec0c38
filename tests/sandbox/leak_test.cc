// Create/exec/destroy cycles and a killed manager leave nothing behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "tests/sandbox/sandbox_fixture.h"

namespace flashroll::sandbox {
namespace {

class SandboxLeakTest : public SandboxFixture {};

size_t EntriesIn(const char* dir) {
  size_t n = 0;
  if (DIR* d = opendir(dir)) {
    while (dirent* e = readdir(d)) n += std::string(e->d_name) != "." && std::string(e->d_name) != "..";
    closedir(d);
  }
  return n;
}

TEST_F(SandboxLeakTest, TwoHundredCyclesLeaveNothingBehind) {
  const size_t mounts_before = MountCount();
  const size_t run_entries_before = EntriesIn("/run/flashroll");
  for (int i = 0; i < 200; ++i) {
    auto id = manager_->Create(SandboxSpec());
    ASSERT_TRUE(id.ok()) << "cycle " << i << ": " << id.status().ToString();
    ExecRequest request;
    request.argv = {"/bin/true"};
    auto r = manager_->Exec(*id, request);
    ASSERT_TRUE(r.ok()) << "cycle " << i << ": " << r.status().ToString();
    ASSERT_EQ(r->exit_code, 0);
    ASSERT_TRUE(manager_->Destroy(*id).ok()) << "cycle " << i;
  }
  EXPECT_TRUE(CgroupDirsWithPrefix(OwnNamePrefix()).empty());
  EXPECT_EQ(MountCount(), mounts_before);
  EXPECT_EQ(EntriesIn("/run/flashroll"), run_entries_before);
  EXPECT_TRUE(manager_->List().empty());
}

TEST_F(SandboxLeakTest, ManagerDestructorDestroysEverything) {
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(CreateOrDie());
  manager_.reset();
  for (const auto& id : ids) EXPECT_TRUE(CgroupDirsWithPrefix(id).empty()) << id;
}

TEST_F(SandboxLeakTest, ReclaimRemovesWhatAKilledManagerLeft) {
  // A manager in another process, killed with SIGKILL while its sandbox runs.
  const pid_t manager_pid = fork();
  ASSERT_GE(manager_pid, 0);
  if (manager_pid == 0) {
    execl(FLASHROLL_BIN, FLASHROLL_BIN, "sandbox", "run", "--", "sleep", "60", nullptr);
    _exit(127);
  }
  const std::string prefix = "fr-" + std::to_string(manager_pid) + "-";
  for (int i = 0; i < 500 && CgroupDirsWithPrefix(prefix).empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_FALSE(CgroupDirsWithPrefix(prefix).empty()) << "the other manager never created its sandbox";
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
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
}

}  // namespace
}  // namespace flashroll::sandbox
