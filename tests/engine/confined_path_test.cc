// ConfinedRoot: a regular file beneath the root opens; an absolute path, a
// ".." escape, a symlink out of the root (to a directory, to a device), a
// FIFO (refused at once, not waited on), a device node and a directory are
// refused with PermissionDenied naming the path; so is a /proc magic link.
#include "engine/format/confined_path.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <future>

#include <gtest/gtest.h>

#include "tests/engine/checkpoint_fixture.h"

namespace flashroll::engine {
namespace {

using testing::TempDir;
using testing::WriteWholeFile;

class ConfinedRootTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_.path() + "/root/sub");
    WriteWholeFile(dir_.path() + "/root/sub/file.txt", "inside");
    WriteWholeFile(dir_.path() + "/outside.txt", "outside");
    auto root = ConfinedRoot::Open(dir_.path() + "/root");
    ASSERT_TRUE(root.ok()) << root.status().ToString();
    root_ = std::move(root).value();
  }

  std::string Root() const { return dir_.path() + "/root"; }

  // Asserts that opening `relative` is refused as PermissionDenied naming it.
  void ExpectDenied(const std::string& relative) {
    Result<int> fd = root_->OpenRegularFile(relative);
    if (fd.ok()) ::close(*fd);
    ASSERT_FALSE(fd.ok()) << relative;
    EXPECT_EQ(fd.status().code(), Code::kPermissionDenied) << fd.status().ToString();
    EXPECT_NE(fd.status().message().find("\"" + relative + "\""), std::string::npos) << fd.status().ToString();
  }

  TempDir dir_;
  std::unique_ptr<ConfinedRoot> root_;
};

TEST_F(ConfinedRootTest, RegularFilesBeneathTheRootOpenAndMap) {
  Result<std::unique_ptr<MappedFile>> file = root_->Map("sub/file.txt");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*file)->data()), (*file)->size()), "inside");
  // ".." and symlinks that stay inside the root are fine.
  ASSERT_EQ(::symlink("sub/file.txt", (Root() + "/link").c_str()), 0);
  for (const char* ok : {"sub/../sub/file.txt", "link"}) {
    Result<int> fd = root_->OpenRegularFile(ok);
    ASSERT_TRUE(fd.ok()) << ok << ": " << fd.status().ToString();
    ::close(*fd);
  }
  // Through the mapper of a directory.
  Result<std::unique_ptr<MappedFile>> mapped = root_->MapperFor("sub/")("file.txt");
  ASSERT_TRUE(mapped.ok()) << mapped.status().ToString();
  EXPECT_EQ((*mapped)->size(), 6u);
}

TEST_F(ConfinedRootTest, AbsolutePathsAreRefused) {
  ExpectDenied(Root() + "/sub/file.txt");
  ExpectDenied("/etc/passwd");
}

TEST_F(ConfinedRootTest, DotDotEscapesAreRefused) {
  ExpectDenied("../outside.txt");
  ExpectDenied("sub/../../outside.txt");
}

TEST_F(ConfinedRootTest, SymlinksOutOfTheRootAreRefused) {
  ASSERT_EQ(::symlink("/etc", (Root() + "/etc").c_str()), 0);
  ASSERT_EQ(::symlink("../outside.txt", (Root() + "/up").c_str()), 0);
  ASSERT_EQ(::symlink("/dev/null", (Root() + "/null").c_str()), 0);
  ExpectDenied("etc/passwd");
  ExpectDenied("up");
  ExpectDenied("null");
}

TEST(ConfinedRoot, MagicLinksAreRefused) {
  // /proc/self/exe is a magic link to a regular file (this test binary);
  // resolving it would jump to wherever it points, whatever the root.
  auto proc = ConfinedRoot::Open("/proc/self");
  ASSERT_TRUE(proc.ok()) << proc.status().ToString();
  Result<int> fd = (*proc)->OpenRegularFile("exe");
  if (fd.ok()) ::close(*fd);
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.status().code(), Code::kPermissionDenied) << fd.status().ToString();
}

TEST_F(ConfinedRootTest, AFifoIsRefusedAtOnce) {
  ASSERT_EQ(::mkfifo((Root() + "/fifo").c_str(), 0600), 0);
  // Without O_NONBLOCK the open would wait for a writer forever.
  auto result = std::async(std::launch::async, [&] { return root_->OpenRegularFile("fifo"); });
  if (result.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    // Unblock the open so the test ends, then fail.
    const int writer = ::open((Root() + "/fifo").c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    ADD_FAILURE() << "opening a FIFO blocked";
    result.wait();
    if (writer >= 0) ::close(writer);
    return;
  }
  Result<int> fd = result.get();
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.status().code(), Code::kPermissionDenied);
  EXPECT_NE(fd.status().message().find("a FIFO"), std::string::npos) << fd.status().ToString();
}

TEST_F(ConfinedRootTest, AFileOrFifoUsedAsADirectoryIsRefused) {
  ASSERT_EQ(::mkfifo((Root() + "/fifo").c_str(), 0600), 0);
  for (const char* path : {"fifo/config.json", "sub/file.txt/config.json"}) {
    Result<int> fd = root_->OpenRegularFile(path);
    if (fd.ok()) ::close(*fd);
    ASSERT_FALSE(fd.ok()) << path;
    EXPECT_EQ(fd.status().code(), Code::kPermissionDenied) << fd.status().ToString();
    EXPECT_NE(fd.status().message().find("not a directory"), std::string::npos) << fd.status().ToString();
  }
}

TEST_F(ConfinedRootTest, DirectoriesAndDeviceNodesAreRefused) {
  ExpectDenied("sub");
  if (::mknod((Root() + "/null-device").c_str(), S_IFCHR | 0600, makedev(1, 3)) != 0) {
    GTEST_SKIP() << "mknod needs CAP_MKNOD: " << std::strerror(errno);
  }
  ExpectDenied("null-device");
}

TEST_F(ConfinedRootTest, MissingFilesAreNotFoundAndTheRootMustBeADirectory) {
  Result<int> missing = root_->OpenRegularFile("sub/none");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound) << missing.status().ToString();
  EXPECT_EQ(ConfinedRoot::Open(Root() + "/sub/file.txt").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ConfinedRoot::Open(Root() + "/none").status().code(), Code::kNotFound);
}

}  // namespace
}  // namespace flashroll::engine
