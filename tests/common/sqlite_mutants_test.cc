// Edges of the SQLite wrapper (common/sqlite.h) that the store tests do not
// reach: only a busy database is retried when switching to WAL.
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "common/sqlite.h"

namespace flashroll::sqlite {
namespace {

TEST(SqliteMutantsTest, AFileThatIsNoDatabaseFailsAtOnce) {
  const std::string path = ::testing::TempDir() + "sqlite_mutants_" + std::to_string(::getpid()) + ".db";
  std::ofstream(path, std::ios::binary) << std::string(4096, 'x');
  DatabaseOptions options;
  options.busy_timeout = std::chrono::seconds(20);
  const auto start = std::chrono::steady_clock::now();
  auto db = Database::Open(path, options);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  ::unlink(path.c_str());
  ASSERT_FALSE(db.ok());
  EXPECT_NE(db.status().code(), Code::kUnavailable) << db.status().ToString();
  // Not retried until the busy timeout: that is for a database another
  // process is switching to WAL at the same moment.
  EXPECT_LT(elapsed, std::chrono::seconds(5));
}

}  // namespace
}  // namespace flashroll::sqlite
