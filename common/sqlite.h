// A small wrapper over the system SQLite library: a connection (Database),
// prepared statements (Statement), write transactions (Transaction) and
// numbered schema migrations (Migrate).
//
// Every connection runs in WAL mode with synchronous=NORMAL and foreign keys
// on. With WAL + NORMAL a committed transaction survives the death of the
// process that wrote it (SIGKILL, OOM kill); only a power loss or OS crash can
// roll back the last few commits. Uncommitted work never becomes visible.
//
// Every error message names the SQL it came from (its first ~60 characters,
// whitespace collapsed) and SQLite's own message, e.g.
//   sqlite step "INSERT INTO samples (job_id, task_id, ..."
//   : FOREIGN KEY constraint failed
//
// Thread safety: a Database and the Statements and Transactions made from it
// form one unit that must be used by one thread at a time (the connection is
// opened without SQLite's per-connection mutex). Distinct Database objects
// may be used from distinct threads and processes at the same time, on the
// same file: SQLite's file locks serialise writers, and a writer that finds
// the database locked waits up to the busy timeout before failing with
// kUnavailable. Readers never block writers and vice versa (WAL). A Database
// must not be used across fork(): the child opens its own.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/status.h"

// SQLite's handle types, declared here so sqlite3.h stays out of this header.
struct sqlite3;
struct sqlite3_stmt;

namespace flashroll::sqlite {

class Statement;

struct DatabaseOptions {
  // How long a statement waits for another connection's lock before it
  // fails with kUnavailable.
  std::chrono::milliseconds busy_timeout{5000};
};

// One connection to a database file. Not copyable or movable; own it through
// the unique_ptr that Open returns. Closing it (destruction) requires its
// Statements and Transactions to be gone first.
class Database {
 public:
  // Opens (creating if missing) the database file at `path` and applies the
  // connection settings above. ":memory:" opens a private in-memory database
  // (which cannot use WAL; its journal stays in memory).
  // Returns the connection, or kIoError / kPermissionDenied / kCorruption
  // (not a database) / kUnavailable (locked past the busy timeout) with a
  // message naming `path`.
  static Result<std::unique_ptr<Database>> Open(const std::string& path,
                                                const DatabaseOptions& options = {});

  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;
  ~Database();

  // Runs every statement in `sql` (separated by ';') to completion, ignoring
  // any rows they return; meant for DDL and PRAGMAs. Statements before a
  // failing one stay applied unless the caller holds a Transaction.
  // Returns OK, or the error of the first failing statement.
  Status Exec(std::string_view sql);

  // Compiles one SQL statement. Returns the statement, or kInvalidArgument
  // (syntax error, unknown table or column) with the SQL in the message.
  // Text after the first statement is an error, not silently ignored.
  Result<Statement> Prepare(std::string_view sql);

  // The rowid of the last successful INSERT on this connection.
  int64_t LastInsertRowId() const;

  // Rows changed by the last INSERT, UPDATE or DELETE on this connection.
  int64_t Changes() const;

  // True while an explicit transaction (BEGIN ... ) is open.
  bool InTransaction() const;

  const std::string& path() const { return path_; }

 private:
  Database(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}

  sqlite3* const db_;
  const std::string path_;
};

// A compiled statement. Parameters are numbered from 1 (?1, ?2, or the order
// of '?'); named parameters (:name, @name, $name) are bound by their name as
// written in the SQL, prefix included. Columns are numbered from 0. Strings
// and blobs are copied when bound. A statement that has returned a row holds
// a read snapshot (which keeps the WAL from being checkpointed) until it
// finishes, is Reset or is destroyed. Must not outlive its Database.
class Statement {
 public:
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement();

  // Each Bind returns OK, or kInvalidArgument when the parameter does not
  // exist (index out of range, unknown name), with the SQL in the message.
  Status Bind(int index, int64_t value);
  Status Bind(int index, double value);
  Status Bind(int index, std::string_view text);
  Status Bind(int index, const char* text) { return Bind(index, std::string_view(text)); }
  Status Bind(int index, std::span<const uint8_t> blob);  // empty binds a zero-length blob, not NULL
  Status Bind(int index, std::nullptr_t);
  // Any other integer type (int, bool, uint32_t, ...) binds as int64_t.
  template <typename I>
    requires(std::is_integral_v<I> && !std::is_same_v<I, int64_t>)
  Status Bind(int index, I value) {
    return Bind(index, static_cast<int64_t>(value));
  }
  // An empty optional binds NULL.
  template <typename T>
  Status Bind(int index, const std::optional<T>& value) {
    return value.has_value() ? Bind(index, *value) : Bind(index, nullptr);
  }
  template <typename T>
  Status Bind(std::string_view name, T&& value) {
    FR_ASSIGN_OR_RETURN(int index, ParameterIndex(name));
    return Bind(index, std::forward<T>(value));
  }

  // Runs the statement one step. Returns true when a row is available through
  // the Column getters, false when the statement has finished, or an error
  // (kUnavailable when locked past the busy timeout, kAlreadyExists for a
  // UNIQUE/PRIMARY KEY conflict, kInvalidArgument for other constraints, ...).
  Result<bool> Step();

  // Steps to completion, ignoring any rows. Returns OK or Step's error.
  Status Run();

  // Column getters for the current row (valid after Step returned true).
  // NULL reads as 0, 0.0, "" or an empty blob; use IsNull to tell.
  int ColumnCount() const;
  bool IsNull(int column) const;
  int64_t ColumnInt64(int column) const;
  double ColumnDouble(int column) const;
  std::string ColumnText(int column) const;
  std::vector<uint8_t> ColumnBlob(int column) const;

  // Rewinds the statement and clears its bindings (all parameters NULL), so
  // it can be bound and run again.
  void Reset();

  // The SQL text the statement was compiled from.
  std::string_view sql() const;

 private:
  friend class Database;
  explicit Statement(sqlite3_stmt* stmt) : stmt_(stmt) {}

  Result<int> ParameterIndex(std::string_view name) const;
  Status BindResult(int rc, int index) const;

  sqlite3_stmt* stmt_ = nullptr;
};

// A write transaction: BEGIN IMMEDIATE on creation (taking the write lock up
// front, so a conflicting writer waits at BEGIN instead of failing half way),
// ROLLBACK on destruction unless committed. Must not outlive its Database.
class Transaction {
 public:
  // Returns the open transaction, or an error: kUnavailable when another
  // connection holds the write lock past the busy timeout, kInvalidArgument
  // when a transaction is already open on this connection.
  static Result<Transaction> Begin(Database& db);

  Transaction(Transaction&& other) noexcept;
  Transaction& operator=(Transaction&&) = delete;
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction();

  // Makes the transaction's changes durable and visible. Returns OK, or the
  // error; after an error the transaction is rolled back (at the latest by
  // the destructor). Calling Commit twice is kFailedPrecondition.
  Status Commit();

 private:
  explicit Transaction(Database* db) : db_(db) {}

  Database* db_;  // null once committed or moved from
};

// One numbered schema step. Versions start at 1 and increase by one.
struct Migration {
  int version;
  std::string sql;
};

// Brings the schema up to the last migration's version. The current version
// is PRAGMA user_version (0 for a new file); each migration newer than it
// runs, in order, in its own transaction that also sets user_version, so a
// crash leaves the schema at some whole version. Safe against other
// processes migrating the same file at the same time. Running it again is a
// no-op. Migrations run with foreign-key enforcement off, as SQLite's
// table-rebuild procedure requires, and each must pass PRAGMA
// foreign_key_check before it commits; enforcement is back on afterwards.
// Migration SQL must be transactional (no VACUUM). Returns OK; kInvalidArgument when `migrations` is not numbered
// 1, 2, 3, ...; kFailedPrecondition when the database's version is newer
// than the last migration (written by a newer build); or the failing
// migration's error (kFailedPrecondition for a dangling foreign key),
// wrapped with its version.
Status Migrate(Database& db, const std::vector<Migration>& migrations);

// Reads PRAGMA user_version. Returns it, or the error.
Result<int> SchemaVersion(Database& db);

}  // namespace flashroll::sqlite
