// The rw bind made from the checked descriptor (sandbox/held_path.h,
// mount.h), step by step where the race test (rw_bind_race_test.cc) only
// samples: a path changed between the check and the create binds the
// checked directory, a path with a symlink on the way or naming the host
// root is refused. Needs root (skips otherwise).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "sandbox/held_path.h"
#include "tests/sandbox/sandbox_fixture.h"

namespace flashroll::sandbox {
namespace {

namespace fs = std::filesystem;

class HeldBindTest : public SandboxFixture {
 protected:
  void SetUp() override {
    SandboxFixture::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    char dir[] = "/tmp/flashroll-held-bind-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
    fs::create_directories(dir_ + "/ws/a/work");
    fs::create_directories(dir_ + "/host/work");
    std::ofstream(dir_ + "/ws/a/work/marker") << "inside";
    std::ofstream(dir_ + "/host/work/marker") << "HOST";
    ASSERT_EQ(::chmod((dir_ + "/ws/a/work").c_str(), 0777), 0);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  std::string dir_;
};

// The attacker's swap, made at the worst moment by hand: after the check
// (the descriptor is held), before the create. The held directory, now
// renamed away, is what gets bound at the path, and what is written there
// lands in it.
TEST_F(HeldBindTest, APathSwappedAfterTheCheckStillBindsTheCheckedDirectory) {
  const std::string path = dir_ + "/ws/a/work";
  auto held = HoldHostPath(path);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  fs::rename(dir_ + "/ws/a", dir_ + "/ws/a-checked");
  fs::create_directory_symlink(dir_ + "/host", dir_ + "/ws/a");
  SandboxSpec spec;
  spec.rw_paths = {path};
  spec.rw_held = {*held};
  const std::string id = CreateOrDie(spec);
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(Run(id, {"/bin/cat", path + "/marker"}).stdout_data, "inside");
  EXPECT_EQ(Sh(id, "echo written > " + path + "/out").exit_code, 0);
  EXPECT_EQ(ReadHostFile(dir_ + "/ws/a-checked/work/out"), "written\n");
  EXPECT_FALSE(fs::exists(dir_ + "/host/work/out"));
  ASSERT_TRUE(manager_->Destroy(id).ok());
}

// `sandbox run --rw` with no policy: the manager opens the path itself,
// following no symlink, so a component an attacker turned into one is
// refused, naming the path, and nothing is created.
TEST_F(HeldBindTest, ASymlinkOnTheWayOfAnRwPathIsRefused) {
  fs::create_directory_symlink(dir_ + "/host", dir_ + "/ws/link");
  SandboxSpec spec;
  spec.rw_paths = {dir_ + "/ws/link/work"};
  auto id = manager_->Create(spec);
  ASSERT_FALSE(id.ok()) << "bound " << spec.rw_paths[0];
  EXPECT_EQ(id.status().code(), Code::kInvalidArgument) << id.status().ToString();
  EXPECT_NE(id.status().message().find(dir_ + "/ws/link/work"), std::string::npos) << id.status().ToString();
  EXPECT_NE(id.status().message().find("symlink"), std::string::npos) << id.status().ToString();
  EXPECT_TRUE(manager_->List().empty());
}

// `--rw /a//b/` names the directory /a/b: it is bound there (the plan makes
// one directory per component; "a/" was one, and mkdirat failed on it).
TEST_F(HeldBindTest, AnRwPathWithDoubledOrTrailingSlashesIsBoundAtItsNormalForm) {
  const std::string path = dir_ + "/ws/a/work";
  const std::string doubled = dir_ + "//ws/a//work/";
  auto held = HoldHostPath(doubled);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  EXPECT_EQ((*held)->path, path);
  SandboxSpec spec;
  spec.rw_paths = {doubled};
  const std::string id = CreateOrDie(spec);
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(Run(id, {"/bin/cat", path + "/marker"}).stdout_data, "inside");
  EXPECT_EQ(Sh(id, "echo written > " + path + "/out").exit_code, 0);
  EXPECT_EQ(ReadHostFile(dir_ + "/ws/a/work/out"), "written\n");
  ASSERT_TRUE(manager_->Destroy(id).ok());
}

// "/." passes every check on the string but names the host root.
TEST_F(HeldBindTest, TheHostRootUnderAnotherNameIsRefused) {
  for (const char* root : {"/.", "//", "/./"}) {
    SandboxSpec spec;
    spec.rw_paths = {root};
    auto id = manager_->Create(spec);
    ASSERT_FALSE(id.ok()) << "bound " << root << " read-write";
    EXPECT_EQ(id.status().code(), Code::kInvalidArgument) << id.status().ToString();
    EXPECT_NE(id.status().message().find("host root"), std::string::npos) << id.status().ToString();
  }
  EXPECT_TRUE(manager_->List().empty());
}

// Where the held tree's device and inode are checked against the mount:
// a held descriptor that does not match its path is refused before the
// launch.
TEST_F(HeldBindTest, AHeldDescriptorForAnotherPathIsRefused) {
  auto held = HoldHostPath(dir_ + "/host/work");
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  SandboxSpec spec;
  spec.rw_paths = {dir_ + "/ws/a/work"};
  spec.rw_held = {*held};
  auto id = manager_->Create(spec);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), Code::kInternal) << id.status().ToString();
  EXPECT_TRUE(manager_->List().empty());
}

// The child checks what got mounted against the recorded device and
// inode, whichever way the bind was made: a held path whose descriptor is
// another directory than the one recorded fails the create in the child.
TEST_F(HeldBindTest, AMountThatIsNotTheRecordedInodeFailsInTheChild) {
  auto checked = HoldHostPath(dir_ + "/ws/a/work");
  auto other = HoldHostPath(dir_ + "/host/work");
  ASSERT_TRUE(checked.ok() && other.ok());
  auto forged = std::make_shared<HeldPath>();
  forged->path = (*checked)->path;
  forged->fd = UniqueFd(::dup((*other)->fd.get()));  // the descriptor of another directory
  forged->dev = (*checked)->dev;
  forged->ino = (*checked)->ino;
  forged->mode = (*checked)->mode;
  SandboxSpec spec;
  spec.rw_paths = {forged->path};
  spec.rw_held = {forged};
  auto id = manager_->Create(spec);
  ASSERT_FALSE(id.ok()) << "bound " << dir_ << "/host/work at " << forged->path;
  EXPECT_NE(id.status().message().find("not the checked inode"), std::string::npos) << id.status().ToString();
  EXPECT_TRUE(manager_->List().empty());
}

}  // namespace
}  // namespace flashroll::sandbox
