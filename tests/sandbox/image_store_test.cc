// The image store (sandbox/image_store.h): names, imports of directories
// and OCI layouts, and resolving a name back to its tree.
#include "sandbox/image_store.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "tests/sandbox/oci_layout_builder.h"

namespace flashroll::sandbox {
namespace {

namespace fs = std::filesystem;
using namespace oci_testing;

class ImageStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/flashroll-store-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
    store_ = dir_ + "/store";
    fs::create_directories(dir_ + "/src/bin");
    WriteFile(dir_ + "/src/bin/tool", "v1");
    fs::create_symlink("tool", dir_ + "/src/bin/alias");
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string dir_;
  std::string store_;
};

TEST_F(ImageStoreTest, NamesArePlain) {
  EXPECT_TRUE(CheckImageName("python-3.12_slim").ok());
  for (const char* bad : {"", ".hidden", "-flag", "a/b", "..", "a:b", "white space", "host", "busybox"}) {
    EXPECT_EQ(CheckImageName(bad).code(), Code::kInvalidArgument) << bad;
  }
  EXPECT_EQ(CheckImageName(std::string(65, 'a')).code(), Code::kInvalidArgument);
  EXPECT_TRUE(CheckImageName(std::string(64, 'a')).ok());
}

TEST_F(ImageStoreTest, ADirectoryIsCopiedSoTheSourceCannotChangeIt) {
  ASSERT_TRUE(ImportImage(store_, dir_ + "/src", "tools").ok());
  auto tree = StoredImage(store_, "tools");
  ASSERT_TRUE(tree.ok()) << tree.status().ToString();
  EXPECT_EQ(*tree, store_ + "/tools");
  EXPECT_EQ(ReadFile(*tree + "/bin/tool"), "v1");
  EXPECT_TRUE(fs::is_symlink(*tree + "/bin/alias"));
  WriteFile(dir_ + "/src/bin/tool", "v2");
  EXPECT_EQ(ReadFile(*tree + "/bin/tool"), "v1");

  const Status again = ImportImage(store_, dir_ + "/src", "tools");
  EXPECT_EQ(again.code(), Code::kAlreadyExists) << again.ToString();
  EXPECT_EQ(ReadFile(*tree + "/bin/tool"), "v1");
}

TEST_F(ImageStoreTest, AFailedImportLeavesNothing) {
  ASSERT_EQ(::mkfifo((dir_ + "/src/pipe").c_str(), 0644), 0);
  const Status status = ImportImage(store_, dir_ + "/src", "tools");
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("copy " + dir_ + "/src"), std::string::npos) << status.ToString();
  EXPECT_TRUE(fs::is_empty(store_));
  EXPECT_EQ(StoredImage(store_, "tools").status().code(), Code::kNotFound);
}

TEST_F(ImageStoreTest, BadSourcesAndNamesAreRefused) {
  EXPECT_EQ(ImportImage(store_, dir_ + "/src", "../x").code(), Code::kInvalidArgument);
  EXPECT_EQ(ImportImage(store_, "busybox", "bb").code(), Code::kInvalidArgument);
  EXPECT_EQ(ImportImage(store_, "relative/dir", "x").code(), Code::kInvalidArgument);
  EXPECT_EQ(ImportImage(store_, dir_ + "/missing", "x").code(), Code::kNotFound);
  // A REF needs an OCI layout.
  EXPECT_EQ(ImportImage(store_, dir_ + "/src:latest", "x").code(), Code::kInvalidArgument);
}

TEST_F(ImageStoreTest, AnOciLayoutIsUnpackedOnceAndNamedByALink) {
  LayoutBuilder layout;
  const std::string manifest = layout.Write({{MakeTar({{"bin/", AE_IFDIR, "", 0755, ""},
                                                       {"bin/hello", AE_IFREG, "hi\n", 0755, ""}}),
                                              kTar}});
  ASSERT_TRUE(ImportImage(store_, layout.dir(), "hello").ok());
  ASSERT_TRUE(ImportImage(store_, layout.dir(), "hello-again").ok());
  EXPECT_EQ(fs::read_symlink(store_ + "/hello"), ".oci/" + manifest);
  auto tree = StoredImage(store_, "hello-again");
  ASSERT_TRUE(tree.ok()) << tree.status().ToString();
  EXPECT_EQ(*tree, store_ + "/.oci/" + manifest);
  EXPECT_EQ(ReadFile(*tree + "/bin/hello"), "hi\n");
}

TEST_F(ImageStoreTest, EntriesThatLeadOutOfTheStoreAreRefused) {
  fs::create_directories(store_);
  fs::create_directory_symlink("/usr", store_ + "/usr-link");
  auto tree = StoredImage(store_, "usr-link");
  EXPECT_EQ(tree.status().code(), Code::kInvalidArgument) << tree.status().ToString();
  EXPECT_NE(tree.status().message().find("outside the store"), std::string::npos);
  WriteFile(store_ + "/file", "x");
  EXPECT_NE(StoredImage(store_, "file").status().message().find("is not a directory"), std::string::npos);
  EXPECT_EQ(StoredImage(store_, "missing").status().code(), Code::kNotFound);
  EXPECT_EQ(StoredImage(store_, "../store").status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace flashroll::sandbox
