#include "scheduler/ack_ledger.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "common/store.h"

namespace flashroll {
namespace {

class AckLedgerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "ack_ledger_test.XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    auto db = store::OpenStore(dir_ + "/store.db");
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    db_ = std::move(db).value();
    auto job = store::CreateJob(*db_, "ledger", "kind: rl_job\n");
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    job_id_ = *job;
    auto ledger = AckLedger::Open(dir_ + "/store.db", job_id_, /*max_staleness=*/1);
    ASSERT_TRUE(ledger.ok()) << ledger.status().ToString();
    ledger_ = std::move(ledger).value();
  }
  void TearDown() override {
    ledger_.reset();
    db_.reset();
    std::filesystem::remove_all(dir_);
  }

  std::string dir_;
  std::unique_ptr<sqlite::Database> db_;
  int64_t job_id_ = 0;
  std::unique_ptr<AckLedger> ledger_;
};

// A version is published once: the same version at the same path again is
// a retry (OK, the engine is not asked again), at another path a conflict
// naming both. The old ledger ignored the duplicate record and asked the
// engine again, whatever the path, and the store kept the first path.
TEST_F(AckLedgerTest, AVersionPublishedAgainIsARetryAtItsPathAndAConflictAtAnother) {
  int accepted = 0;
  const auto accept = [&] {
    ++accepted;
    return Status::Ok();
  };
  ASSERT_TRUE(ledger_->Published("v000001", 1, accept).ok());
  const Status retry = ledger_->Published("v000001", 1, accept);
  EXPECT_TRUE(retry.ok()) << retry.ToString();
  EXPECT_EQ(accepted, 1) << "a retried publish loads nothing again";
  const Status other = ledger_->Published("v000001-other", 1, accept);
  EXPECT_EQ(other.code(), Code::kAlreadyExists) << other.ToString();
  EXPECT_NE(other.message().find("already published at v000001, not at v000001-other"), std::string::npos)
      << other.ToString();
  EXPECT_EQ(accepted, 1);
  auto path = store::WeightVersionPath(*db_, job_id_, 1);
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  EXPECT_EQ(*path, "v000001");
  ASSERT_TRUE(ledger_->Published("v000002", 2, accept).ok());
  EXPECT_EQ(accepted, 2);
}

TEST_F(AckLedgerTest, HighestCheckpointOnDiskCountsVersionDirectories) {
  const std::string root = dir_ + "/ckpt";
  auto none = HighestCheckpointOnDisk(root);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(*none, -1) << "a root no trainer created yet holds no checkpoint";
  std::filesystem::create_directories(root + "/v000002");
  std::filesystem::create_directories(root + "/v000010");
  std::filesystem::create_directories(root + "/.v000011.tmp-7");
  std::filesystem::create_directories(root + "/vx");
  std::ofstream(root + "/v000012") << "a file, not a checkpoint";
  auto highest = HighestCheckpointOnDisk(root);
  ASSERT_TRUE(highest.ok()) << highest.status().ToString();
  EXPECT_EQ(*highest, 10);
}

// A version directory is "v" and up to 15 digits (what std::stoll reads
// without overflow, with room); a longer name is not a checkpoint.
TEST_F(AckLedgerTest, VersionNamesOfUpToFifteenDigitsCount) {
  const std::string root = dir_ + "/ckpt";
  std::filesystem::create_directories(root + "/v000000000000123");   // 15 digits
  std::filesystem::create_directories(root + "/v9000000000000000");  // 16 digits
  auto highest = HighestCheckpointOnDisk(root);
  ASSERT_TRUE(highest.ok()) << highest.status().ToString();
  EXPECT_EQ(*highest, 123);
}

// A root that cannot be read fails closed (the old function answered -1,
// "no checkpoint", so the versions a dead trainer wrote there would have
// been accepted). Tests run as root, for whom permissions do not stop a
// read: a root reached through a regular file (ENOTDIR) fails for anyone.
TEST_F(AckLedgerTest, AnUnreadableCheckpointRootFailsClosedNamingItAndErrno) {
  std::ofstream(dir_ + "/file") << "not a directory";
  for (const std::string& root : {dir_ + "/file", dir_ + "/file/ckpt"}) {
    auto highest = HighestCheckpointOnDisk(root);
    ASSERT_FALSE(highest.ok()) << root << " answered " << *highest;
    EXPECT_EQ(highest.status().code(), Code::kIoError);
    EXPECT_NE(highest.status().message().find("checkpoint root " + root + ": "), std::string::npos)
        << highest.status().ToString();
    EXPECT_NE(highest.status().message().find("errno " + std::to_string(ENOTDIR)), std::string::npos)
        << highest.status().ToString();
  }
}

}  // namespace
}  // namespace flashroll
