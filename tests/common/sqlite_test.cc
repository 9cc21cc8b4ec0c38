#include "common/sqlite.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace flashroll::sqlite {
namespace {

class SqliteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "sqlite_test.XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    path_ = dir_ + "/test.db";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<Database> OpenOrDie(const DatabaseOptions& options = {}) {
    Result<std::unique_ptr<Database>> db = Database::Open(path_, options);
    EXPECT_TRUE(db.ok()) << db.status().ToString();
    return db.ok() ? std::move(db).value() : nullptr;
  }

  std::string dir_;
  std::string path_;
};

// The first column of the first row of `sql`, as text.
std::string QueryText(Database& db, std::string_view sql) {
  Result<Statement> stmt = db.Prepare(sql);
  if (!stmt.ok()) return "prepare failed: " + stmt.status().ToString();
  Result<bool> row = stmt->Step();
  if (!row.ok()) return "step failed: " + row.status().ToString();
  if (!*row) return "no row";
  return stmt->ColumnText(0);
}

int64_t QueryInt(Database& db, std::string_view sql) { return std::stoll(QueryText(db, sql)); }

TEST_F(SqliteTest, OpenAppliesConnectionSettings) {
  auto db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(QueryText(*db, "PRAGMA journal_mode"), "wal");
  EXPECT_EQ(QueryInt(*db, "PRAGMA synchronous"), 1);  // NORMAL
  EXPECT_EQ(QueryInt(*db, "PRAGMA foreign_keys"), 1);
  EXPECT_EQ(QueryInt(*db, "PRAGMA busy_timeout"), 5000);
  EXPECT_EQ(db->path(), path_);
}

TEST_F(SqliteTest, WalIsOnInTheFileItself) {
  auto db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(db->Exec("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1)").ok());
  // Writes go to the -wal file first, and the database header records WAL
  // mode: bytes 18 and 19 (file format write/read version) are 2, not 1.
  EXPECT_TRUE(std::filesystem::exists(path_ + "-wal"));
  db.reset();
  std::ifstream file(path_, std::ios::binary);
  std::vector<char> header(100);
  ASSERT_TRUE(file.read(header.data(), header.size()));
  EXPECT_EQ(std::string(header.data(), 15), "SQLite format 3");
  EXPECT_EQ(header[18], 2);
  EXPECT_EQ(header[19], 2);
}

TEST_F(SqliteTest, InMemoryDatabaseOpens) {
  Result<std::unique_ptr<Database>> db = Database::Open(":memory:");
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  EXPECT_TRUE((*db)->Exec("CREATE TABLE t (x)").ok());
}

TEST_F(SqliteTest, OpenFailureNamesThePath) {
  const std::string missing = dir_ + "/no/such/dir/x.db";
  Result<std::unique_ptr<Database>> db = Database::Open(missing);
  ASSERT_FALSE(db.ok());
  EXPECT_EQ(db.status().code(), Code::kIoError);
  EXPECT_NE(db.status().message().find(missing), std::string::npos) << db.status().ToString();
  EXPECT_NE(db.status().message().find("No such file or directory"), std::string::npos) << db.status().ToString();
}

TEST_F(SqliteTest, OpenRefusesAFileThatIsNotADatabase) {
  std::ofstream(path_) << std::string(4096, 'x');
  Result<std::unique_ptr<Database>> db = Database::Open(path_);
  ASSERT_FALSE(db.ok());
  EXPECT_EQ(db.status().code(), Code::kCorruption) << db.status().ToString();
  EXPECT_NE(db.status().message().find(path_), std::string::npos) << db.status().ToString();
  EXPECT_NE(db.status().message().find("file is not a database"), std::string::npos) << db.status().ToString();
}

TEST_F(SqliteTest, BindsAndReadsEveryType) {
  auto db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(db->Exec("CREATE TABLE t (i INTEGER, d REAL, s TEXT, b BLOB, n)").ok());
  {
    Result<Statement> insert = db->Prepare("INSERT INTO t VALUES (?1, ?2, ?3, ?4, ?5)");
    ASSERT_TRUE(insert.ok()) << insert.status().ToString();
    const std::vector<uint8_t> blob = {0, 1, 2, 255};
    ASSERT_TRUE(insert->Bind(1, int64_t{1} << 40).ok());
    ASSERT_TRUE(insert->Bind(2, 2.5).ok());
    ASSERT_TRUE(insert->Bind(3, std::string("a\0b", 3)).ok());  // embedded NUL survives
    ASSERT_TRUE(insert->Bind(4, blob).ok());
    ASSERT_TRUE(insert->Bind(5, nullptr).ok());
    ASSERT_TRUE(insert->Run().ok());
    EXPECT_EQ(db->Changes(), 1);
    EXPECT_EQ(db->LastInsertRowId(), 1);

    // Empty text and blob stay empty values, not NULL; an empty optional is NULL.
    insert->Reset();
    ASSERT_TRUE(insert->Bind(1, 7).ok());  // a plain int binds as an integer
    ASSERT_TRUE(insert->Bind(2, std::optional<double>()).ok());
    ASSERT_TRUE(insert->Bind(3, std::string_view()).ok());
    ASSERT_TRUE(insert->Bind(4, std::span<const uint8_t>()).ok());
    ASSERT_TRUE(insert->Bind(5, std::optional<int64_t>(9)).ok());
    ASSERT_TRUE(insert->Run().ok());
  }
  Result<Statement> select = db->Prepare("SELECT i, d, s, b, n, typeof(s), typeof(b) FROM t ORDER BY rowid");
  ASSERT_TRUE(select.ok()) << select.status().ToString();
  EXPECT_EQ(select->ColumnCount(), 7);
  ASSERT_TRUE(*select->Step());
  EXPECT_EQ(select->ColumnInt64(0), int64_t{1} << 40);
  EXPECT_EQ(select->ColumnDouble(1), 2.5);
  EXPECT_EQ(select->ColumnText(2), std::string("a\0b", 3));
  EXPECT_EQ(select->ColumnBlob(3), (std::vector<uint8_t>{0, 1, 2, 255}));
  EXPECT_TRUE(select->IsNull(4));
  EXPECT_FALSE(select->IsNull(0));
  ASSERT_TRUE(*select->Step());
  EXPECT_EQ(select->ColumnInt64(0), 7);
  EXPECT_TRUE(select->IsNull(1));
  EXPECT_FALSE(select->IsNull(2));
  EXPECT_EQ(select->ColumnText(5), "text");
  EXPECT_EQ(select->ColumnText(6), "blob");
  EXPECT_TRUE(select->ColumnBlob(3).empty());
  EXPECT_EQ(select->ColumnInt64(4), 9);
  EXPECT_FALSE(*select->Step());
}

TEST_F(SqliteTest, BindsByNameAndResetClearsBindings) {
  auto db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  Result<Statement> stmt = db->Prepare("SELECT :a + :b, :a IS NULL");
  ASSERT_TRUE(stmt.ok()) << stmt.status().ToString();
  ASSERT_TRUE(stmt->Bind(":a", 40).ok());
  ASSERT_TRUE(stmt->Bind(":b", int64_t{2}).ok());
  ASSERT_TRUE(*stmt->Step());
  EXPECT_EQ(stmt->ColumnInt64(0), 42);
  stmt->Reset();
  ASSERT_TRUE(*stmt->Step());
  EXPECT_EQ(stmt->ColumnInt64(1), 1);  // :a is NULL again after Reset

  Status unknown = stmt->Bind(":nope", 1);
  EXPECT_EQ(unknown.code(), Code::kInvalidArgument);
  EXPECT_NE(unknown.message().find(":nope"), std::string::npos) << unknown.ToString();
  EXPECT_NE(unknown.message().find("SELECT :a + :b"), std::string::npos) << unknown.ToString();

  stmt->Reset();
  Status range = stmt->Bind(3, 1);
  EXPECT_EQ(range.code(), Code::kInvalidArgument);
  EXPECT_NE(range.message().find("parameter 3"), std::string::npos) << range.ToString();
  EXPECT_NE(range.message().find("SELECT :a + :b"), std::string::npos) << range.ToString();
}

TEST_F(SqliteTest, ErrorsCarryTheSqlAndSqliteMessage) {
  auto db = OpenOrDie();
  ASSERT_NE(db, nullptr);

  Result<Statement> syntax = db->Prepare("SELEC 1");
  ASSERT_FALSE(syntax.ok());
  EXPECT_EQ(syntax.status().code(), Code::kInvalidArgument);
  EXPECT_NE(syntax.status().message().find("\"SELEC 1\""), std::string::npos) << syntax.status().ToString();
  EXPECT_NE(syntax.status().message().find("syntax error"), std::string::npos) << syntax.status().ToString();

  // Long SQL is cut to its first ~60 characters on one line.
  const std::string long_sql =
      "SELECT\n  missing_column_with_a_long_name,\n  " + std::string(200, 'y') + " FROM nowhere";
  Result<Statement> missing = db->Prepare(long_sql);
  ASSERT_FALSE(missing.ok());
  const std::string& message = missing.status().message();
  EXPECT_NE(message.find("\"SELECT missing_column_with_a_long_name, yyy"), std::string::npos) << message;
  EXPECT_NE(message.find("...\""), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_LT(message.size(), 160u) << message;
  EXPECT_NE(message.find("no such table: nowhere"), std::string::npos) << message;

  // A constraint failure at Step names the statement and the constraint.
  ASSERT_TRUE(db->Exec("CREATE TABLE u (k TEXT PRIMARY KEY, v INTEGER NOT NULL)").ok());
  ASSERT_TRUE(db->Exec("INSERT INTO u VALUES ('a', 1)").ok());
  Result<Statement> dup = db->Prepare("INSERT INTO u VALUES ('a', 2)");
  ASSERT_TRUE(dup.ok());
  Status step = dup->Run();
  EXPECT_EQ(step.code(), Code::kAlreadyExists) << step.ToString();
  EXPECT_NE(step.message().find("INSERT INTO u VALUES ('a', 2)"), std::string::npos) << step.ToString();
  EXPECT_NE(step.message().find("UNIQUE constraint failed: u.k"), std::string::npos) << step.ToString();
  Status not_null = db->Exec("INSERT INTO u VALUES ('b', NULL)");
  EXPECT_EQ(not_null.code(), Code::kInvalidArgument) << not_null.ToString();
  EXPECT_NE(not_null.message().find("NOT NULL constraint failed: u.v"), std::string::npos) << not_null.ToString();
}

TEST_F(SqliteTest, PrepareTakesExactlyOneStatement) {
  auto db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  EXPECT_TRUE(db->Prepare("SELECT 1; -- trailing comment\n").ok());
  Result<Statement> two = db->Prepare("SELECT 1; SELECT 2");
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.status().message().find("more than one statement"), std::string::npos) << two.status().ToString();
  EXPECT_FALSE(db->Prepare("  -- nothing\n").ok());
}

TEST_F(SqliteTest, ExecNamesTheFailingStatement) {
  auto db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  Status status = db->Exec("CREATE TABLE a (x);\n INSERT INTO a VALUES (1);\n INSERT INTO nope VALUES (1);");
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("\"INSERT INTO nope VALUES (1);"), std::string::npos) << status.ToString();
  EXPECT_NE(status.message().find("no such table: nope"), std::string::npos) << status.ToString();
  // Statements before the failing one ran (no transaction was held).
  EXPECT_EQ(QueryInt(*db, "SELECT count(*) FROM a"), 1);
}

TEST_F(SqliteTest, TransactionRollsBackWhenDestroyedUncommitted) {
  auto db = OpenOrDie();
  auto other = OpenOrDie();
  ASSERT_NE(db, nullptr);
  ASSERT_NE(other, nullptr);
  ASSERT_TRUE(db->Exec("CREATE TABLE t (x INTEGER)").ok());
  {
    Result<Transaction> txn = Transaction::Begin(*db);
    ASSERT_TRUE(txn.ok()) << txn.status().ToString();
    EXPECT_TRUE(db->InTransaction());
    ASSERT_TRUE(db->Exec("INSERT INTO t VALUES (1)").ok());
    EXPECT_EQ(QueryInt(*db, "SELECT count(*) FROM t"), 1);
    EXPECT_EQ(QueryInt(*other, "SELECT count(*) FROM t"), 0);  // not visible before commit
  }
  EXPECT_FALSE(db->InTransaction());
  EXPECT_EQ(QueryInt(*db, "SELECT count(*) FROM t"), 0);

  Result<Transaction> txn = Transaction::Begin(*db);
  ASSERT_TRUE(txn.ok()) << txn.status().ToString();
  ASSERT_TRUE(db->Exec("INSERT INTO t VALUES (2)").ok());
  // One transaction per connection at a time.
  Result<Transaction> nested = Transaction::Begin(*db);
  ASSERT_FALSE(nested.ok());
  EXPECT_NE(nested.status().message().find("BEGIN IMMEDIATE"), std::string::npos) << nested.status().ToString();
  ASSERT_TRUE(txn->Commit().ok());
  EXPECT_EQ(txn->Commit().code(), Code::kFailedPrecondition);
  EXPECT_EQ(QueryInt(*other, "SELECT count(*) FROM t"), 1);
}

TEST_F(SqliteTest, WriterWaitsForTheBusyTimeoutThenFails) {
  auto holder = OpenOrDie();
  auto waiter = OpenOrDie({.busy_timeout = std::chrono::milliseconds(200)});
  ASSERT_NE(holder, nullptr);
  ASSERT_NE(waiter, nullptr);
  EXPECT_EQ(QueryInt(*waiter, "PRAGMA busy_timeout"), 200);
  Result<Transaction> held = Transaction::Begin(*holder);
  ASSERT_TRUE(held.ok()) << held.status().ToString();

  const auto start = std::chrono::steady_clock::now();
  Result<Transaction> blocked = Transaction::Begin(*waiter);
  const auto waited = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(blocked.ok());
  EXPECT_EQ(blocked.status().code(), Code::kUnavailable) << blocked.status().ToString();
  EXPECT_NE(blocked.status().message().find("database is locked"), std::string::npos) << blocked.status().ToString();
  EXPECT_GE(waited, std::chrono::milliseconds(150));
  EXPECT_LT(waited, std::chrono::seconds(4));

  // Readers are not blocked by the writer (WAL).
  EXPECT_EQ(QueryInt(*waiter, "SELECT 1"), 1);
  ASSERT_TRUE(held->Commit().ok());
  EXPECT_TRUE(Transaction::Begin(*waiter).ok());
}

std::vector<Migration> CounterMigrations(int count) {
  std::vector<Migration> all = {
      {1, "CREATE TABLE applied (version INTEGER NOT NULL); INSERT INTO applied VALUES (1);"},
      {2, "CREATE TABLE notes (body TEXT); INSERT INTO applied VALUES (2);"},
      {3, "ALTER TABLE notes ADD COLUMN author TEXT; INSERT INTO applied VALUES (3);"},
  };
  all.resize(count);
  return all;
}

TEST_F(SqliteTest, MigrationsApplyOnceAndInOrder) {
  auto db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(*SchemaVersion(*db), 0);
  ASSERT_TRUE(Migrate(*db, CounterMigrations(2)).ok());
  EXPECT_EQ(*SchemaVersion(*db), 2);
  ASSERT_TRUE(Migrate(*db, CounterMigrations(2)).ok());  // idempotent
  EXPECT_EQ(QueryText(*db, "SELECT group_concat(version) FROM applied"), "1,2");

  // A later build adds migration 3: only it runs, also after a reopen.
  db.reset();
  db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(Migrate(*db, CounterMigrations(3)).ok());
  EXPECT_EQ(*SchemaVersion(*db), 3);
  EXPECT_EQ(QueryText(*db, "SELECT group_concat(version) FROM applied"), "1,2,3");
  EXPECT_TRUE(db->Exec("INSERT INTO notes (body, author) VALUES ('x', 'y')").ok());
}

TEST_F(SqliteTest, FailedMigrationLeavesTheWholePreviousVersion) {
  auto db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  std::vector<Migration> migrations = CounterMigrations(1);
  migrations.push_back({2, "CREATE TABLE half (x); INSERT INTO missing_table VALUES (1);"});
  Status status = Migrate(*db, migrations);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("schema version 2"), std::string::npos) << status.ToString();
  EXPECT_NE(status.message().find("INSERT INTO missing_table"), std::string::npos) << status.ToString();
  EXPECT_EQ(*SchemaVersion(*db), 1);
  EXPECT_EQ(QueryInt(*db, "SELECT count(*) FROM sqlite_schema WHERE name = 'half'"), 0);
  EXPECT_FALSE(db->InTransaction());
}

TEST_F(SqliteTest, MigrationsCanRebuildAParentTable) {
  auto db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  const std::vector<Migration> migrations = {
      {1,
       "CREATE TABLE parent (id INTEGER PRIMARY KEY);"
       "CREATE TABLE child (parent_id INTEGER NOT NULL REFERENCES parent (id) ON DELETE CASCADE);"
       "INSERT INTO parent VALUES (1), (2); INSERT INTO child VALUES (1), (2), (2);"},
      // SQLite's rebuild procedure: with enforcement on, the DROP would
      // cascade and delete every child row.
      {2,
       "CREATE TABLE parent_new (id INTEGER PRIMARY KEY, label TEXT NOT NULL DEFAULT '');"
       "INSERT INTO parent_new (id) SELECT id FROM parent;"
       "DROP TABLE parent; ALTER TABLE parent_new RENAME TO parent;"},
  };
  ASSERT_TRUE(Migrate(*db, migrations).ok());
  EXPECT_EQ(QueryInt(*db, "SELECT count(*) FROM child"), 3);
  EXPECT_EQ(QueryInt(*db, "PRAGMA foreign_keys"), 1);
  EXPECT_FALSE(db->Exec("INSERT INTO child VALUES (9)").ok());  // enforced again
}

TEST_F(SqliteTest, MigrationLeavingADanglingForeignKeyFails) {
  auto db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  const std::vector<Migration> migrations = {
      {1,
       "CREATE TABLE parent (id INTEGER PRIMARY KEY);"
       "CREATE TABLE child (parent_id INTEGER REFERENCES parent (id));"
       "INSERT INTO parent VALUES (1); INSERT INTO child VALUES (1);"},
      {2, "DELETE FROM parent;"},
  };
  Status status = Migrate(*db, migrations);
  EXPECT_EQ(status.code(), Code::kFailedPrecondition) << status.ToString();
  EXPECT_NE(status.message().find("schema version 2: foreign key violation"), std::string::npos)
      << status.ToString();
  EXPECT_EQ(*SchemaVersion(*db), 1);
  EXPECT_EQ(QueryInt(*db, "SELECT count(*) FROM parent"), 1);
  EXPECT_EQ(QueryInt(*db, "PRAGMA foreign_keys"), 1);
}

TEST_F(SqliteTest, MigrateRefusesANewerDatabase) {
  auto db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(Migrate(*db, CounterMigrations(3)).ok());
  Status status = Migrate(*db, CounterMigrations(2));
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), Code::kFailedPrecondition);
  EXPECT_NE(status.message().find("schema version 3, newer than the 2 this build knows"), std::string::npos)
      << status.ToString();
  EXPECT_NE(status.message().find(path_), std::string::npos) << status.ToString();
  EXPECT_EQ(*SchemaVersion(*db), 3);
}

TEST_F(SqliteTest, MigrateRejectsMisnumberedMigrations) {
  auto db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  Status status = Migrate(*db, {{1, "CREATE TABLE a (x)"}, {3, "CREATE TABLE b (x)"}});
  EXPECT_EQ(status.code(), Code::kInvalidArgument) << status.ToString();
  EXPECT_EQ(*SchemaVersion(*db), 0);
}

TEST_F(SqliteTest, ConcurrentMigratorsApplyEachMigrationOnce) {
  // Several connections (one per thread) race to migrate a new file.
  constexpr int kThreads = 8;
  std::vector<Status> results(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      Result<std::unique_ptr<Database>> db = Database::Open(path_);
      results[i] = db.ok() ? Migrate(**db, CounterMigrations(3)) : db.status();
    });
  }
  for (std::thread& t : threads) t.join();
  for (const Status& s : results) EXPECT_TRUE(s.ok()) << s.ToString();
  auto db = OpenOrDie();
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(QueryText(*db, "SELECT group_concat(version) FROM applied"), "1,2,3");
}

}  // namespace
}  // namespace flashroll::sqlite
