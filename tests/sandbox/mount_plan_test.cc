// The mount plan's corners (sandbox/mount.h) that the end-to-end tests do
// not reach: where a rootless manager's scratch tmpfs goes, and how a
// create fails when the image leaves no directory where an rw path's parent
// must be made. Needs root (skips otherwise).
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "sandbox/mount.h"
#include "tests/sandbox/sandbox_fixture.h"

namespace flashroll::sandbox {
namespace {

namespace fs = std::filesystem;

// A rootless manager cannot make /run/flashroll; its tmpfs goes over /mnt
// (only inside the sandbox's mount namespace), or over /tmp without one.
TEST(MountPlanTest, ARootlessPlanPutsItsScratchOverMnt) {
  if (::geteuid() != 0) GTEST_SKIP() << "the host image's cache needs root";
  struct stat st {};
  if (::stat("/mnt", &st) != 0 || !S_ISDIR(st.st_mode)) GTEST_SKIP() << "this host has no /mnt directory";
  auto plan = PrepareMountsParentSide(SandboxSpec(), UsernsMode::kRootless);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->scratch, "/mnt");
  EXPECT_EQ(plan->new_root, "/mnt/root");
  auto rooted = PrepareMountsParentSide(SandboxSpec(), UsernsMode::kMapped);
  ASSERT_TRUE(rooted.ok()) << rooted.status().ToString();
  EXPECT_EQ(rooted->scratch, "/run/flashroll");
}

// The shared mount point is root's alone, and the write rules name only
// top-level trees that are no symlink (Landlock would follow one) and no
// read-only bind of the host.
TEST(MountPlanTest, TheScratchIsPrivateAndTheWritableEntriesAreTopLevel) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (/run/flashroll)";
  // On a fresh /run (a child in a mount namespace of its own: a manager
  // that ran before in this process made /run/flashroll already).
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", "/run", "tmpfs", 0, "mode=0755") != 0) {
      ::_exit(2);
    }
    if (!PrepareMountsParentSide(SandboxSpec(), UsernsMode::kMapped).ok()) ::_exit(3);
    struct stat st {};
    ::_exit(::stat("/run/flashroll", &st) == 0 && (st.st_mode & 07777) == 0700 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: /run/flashroll is not 0700; 2: no private /run; 3: no plan";
  auto plan = PrepareMountsParentSide(SandboxSpec(), UsernsMode::kMapped);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const std::vector<std::string>& entries = plan->writable_root_entries;
  for (const std::string& entry : entries) {
    EXPECT_EQ(entry.find('/'), std::string::npos) << entry;
    EXPECT_NE(entry, "usr");  // the host's /usr, bound read-only
    struct stat host {};
    if (::lstat(("/" + entry).c_str(), &host) == 0 && entry != "tmp") {
      EXPECT_FALSE(S_ISLNK(host.st_mode)) << entry << " is a symlink on the host (and in the image)";
    }
  }
  for (const char* expected : {"dev", "etc", "proc", "tmp", "root", "var"}) {
    EXPECT_NE(std::find(entries.begin(), entries.end(), expected), entries.end()) << expected;
  }
}

class MountPlanSandboxTest : public SandboxFixture {
 protected:
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  std::string dir_;
};

// The image has a regular file "tmp" where the rw path /tmp/.../ws needs a
// directory: the create fails at opening that parent, naming the step and
// the path, and leaves no sandbox.
TEST_F(MountPlanSandboxTest, AnImageFileWhereAnRwParentMustBeFailsTheCreateNamingIt) {
  char dir[] = "/tmp/flashroll-mount-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  dir_ = dir;
  fs::create_directories(dir_ + "/ws");
  fs::create_directories(dir_ + "/image/bin");
  std::ofstream(dir_ + "/image/tmp") << "a file, not a directory";
  SandboxSpec spec;
  ASSERT_TRUE(ParseImage(dir_ + "/image", &spec).ok());
  spec.rw_paths = {dir_ + "/ws"};
  auto id = manager_->Create(spec);
  ASSERT_FALSE(id.ok()) << "created " << *id;
  const std::string parent = dir_.substr(1);  // "tmp/flashroll-mount-..."
  EXPECT_NE(id.status().message().find("openat2(parent)"), std::string::npos) << id.status().ToString();
  EXPECT_NE(id.status().message().find(parent), std::string::npos) << id.status().ToString();
  EXPECT_TRUE(manager_->List().empty());
}

// What the plan makes has the modes it asks for, and commands run with
// umask 022 (the child works with umask 0 until its root is in place).
TEST_F(MountPlanSandboxTest, TheMadeTreeHasItsModesAndCommandsRunWithUmask022) {
  char dir[] = "/tmp/flashroll-mount-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  dir_ = dir;
  fs::create_directories(dir_ + "/ws");
  SandboxSpec spec;
  spec.rw_paths = {dir_ + "/ws"};
  const std::string id = CreateOrDie(spec);
  ASSERT_FALSE(id.empty());
  const ExecResult r = Sh(id, "umask; stat -c '%a %n' /dev/shm /tmp " + dir_ + "; touch /tmp/made; stat -c %a /tmp/made");
  EXPECT_EQ(r.stdout_data, "0022\n1777 /dev/shm\n1777 /tmp\n755 " + dir_ + "\n644\n") << r.stderr_data;
  ASSERT_TRUE(manager_->Destroy(id).ok());
}

// The image's tree is cloned idmapped in the child; sysfs has no idmapped
// mounts, so an image there fails the create at that step, naming it and
// the image, and leaves no sandbox.
TEST_F(MountPlanSandboxTest, AnImageThatCannotBeIdmappedFailsTheCreateNamingTheStep) {
  SandboxSpec spec;
  ASSERT_TRUE(ParseImage("/sys/kernel/mm", &spec).ok());
  auto id = manager_->Create(spec);
  if (id.ok()) {
    (void)manager_->Destroy(*id);
    GTEST_SKIP() << "this kernel idmaps sysfs";
  }
  EXPECT_NE(id.status().message().find("mount_setattr(MOUNT_ATTR_IDMAP) /sys/kernel/mm"), std::string::npos)
      << id.status().ToString();
  EXPECT_TRUE(manager_->List().empty());
}

}  // namespace
}  // namespace flashroll::sandbox
