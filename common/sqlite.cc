#include "common/sqlite.h"

#include <sqlite3.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <climits>
#include <cstring>
#include <thread>
#include <utility>

#include "common/log.h"

namespace flashroll::sqlite {
namespace {

constexpr size_t kSnippetChars = 60;

// The first kSnippetChars of `sql` with whitespace runs collapsed, so that a
// multi-line migration still makes a one-line error message.
std::string Snippet(std::string_view sql) {
  std::string out;
  bool pending_space = false;
  for (char c : sql) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out += ' ';
    pending_space = false;
    if (out.size() >= kSnippetChars) {
      out += "...";
      break;
    }
    out += c;
  }
  return out;
}

Code CodeFor(int rc) {
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return Code::kUnavailable;
    case SQLITE_CONSTRAINT:
      if (rc == SQLITE_CONSTRAINT_UNIQUE || rc == SQLITE_CONSTRAINT_PRIMARYKEY ||
          rc == SQLITE_CONSTRAINT_ROWID) {
        return Code::kAlreadyExists;
      }
      return Code::kInvalidArgument;
    case SQLITE_ERROR:
    case SQLITE_RANGE:
    case SQLITE_MISMATCH:
      return Code::kInvalidArgument;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return Code::kCorruption;
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
    case SQLITE_PROTOCOL:
      return Code::kIoError;
    case SQLITE_FULL:
    case SQLITE_NOMEM:
    case SQLITE_TOOBIG:
      return Code::kResourceExhausted;
    case SQLITE_PERM:
    case SQLITE_READONLY:
    case SQLITE_AUTH:
      return Code::kPermissionDenied;
    default:
      return Code::kInternal;
  }
}

// "<what>: <sqlite message>[ (errno N: ...)]". Call right after the failing
// API call, before anything else touches the connection's error state.
std::string Describe(sqlite3* db, int rc) {
  std::string message = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  const int primary = rc & 0xff;
  if (db != nullptr && (primary == SQLITE_IOERR || primary == SQLITE_CANTOPEN || primary == SQLITE_FULL)) {
    const int err = sqlite3_system_errno(db);
    if (err != 0) message += " (errno " + std::to_string(err) + ": " + std::strerror(err) + ")";
  }
  return message;
}

Status SqlError(sqlite3* db, int rc, std::string_view op, std::string_view sql) {
  return Status(CodeFor(rc), "sqlite " + std::string(op) + " \"" + Snippet(sql) + "\": " + Describe(db, rc));
}

// Runs PRAGMA journal_mode=WAL and returns the mode now in force.
Result<std::string> SetWal(Database& db) {
  FR_ASSIGN_OR_RETURN(Statement stmt, db.Prepare("PRAGMA journal_mode=WAL"));
  FR_ASSIGN_OR_RETURN(bool row, stmt.Step());
  return row ? stmt.ColumnText(0) : std::string();
}

// Applies the per-connection settings. The first statement is also the
// first to read the file, so a file that is not a database fails here.
Status Configure(Database& db, const DatabaseOptions& options) {
  // Switching a new file to WAL upgrades a read lock to a write lock, and
  // SQLite reports SQLITE_BUSY at once there instead of calling the busy
  // handler (waiting while holding the read lock could deadlock). Several
  // processes opening a new store at once hit this, so retry up to the
  // busy timeout.
  const auto deadline = std::chrono::steady_clock::now() + options.busy_timeout;
  Result<std::string> mode = SetWal(db);
  while (!mode.ok() && mode.status().code() == Code::kUnavailable && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    mode = SetWal(db);
  }
  if (!mode.ok()) return mode.status();
  // journal_mode answers with the mode now in force; a filesystem without
  // shared-memory support would silently keep the rollback journal.
  const bool in_memory = db.path() == ":memory:" && *mode == "memory";
  if (*mode != "wal" && !in_memory) {
    return Status::FailedPrecondition("journal_mode is \"" + *mode + "\" after PRAGMA journal_mode=WAL");
  }
  FR_RETURN_IF_ERROR(db.Exec("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON"));
  // foreign_keys is silently ignored by builds without foreign-key support.
  FR_ASSIGN_OR_RETURN(Statement stmt, db.Prepare("PRAGMA foreign_keys"));
  FR_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row || stmt.ColumnInt64(0) != 1) return Status::FailedPrecondition("PRAGMA foreign_keys=ON did not take effect");
  return Status::Ok();
}

Status NewerSchemaError(const Database& db, int found, int known) {
  return Status::FailedPrecondition("database " + db.path() + " has schema version " + std::to_string(found) +
                                    ", newer than the " + std::to_string(known) +
                                    " this build knows; use a newer flashroll or another file");
}

}  // namespace

// ---- Database ----

Result<std::unique_ptr<Database>> Database::Open(const std::string& path, const DatabaseOptions& options) {
  const std::string what = "open sqlite database " + path;
  // Distinct connections on distinct threads need a thread-safe library build.
  if (sqlite3_threadsafe() == 0) {
    return Status::FailedPrecondition(what + ": libsqlite3 was built without thread support");
  }
  sqlite3* raw = nullptr;
  const int rc =
      sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    Status status(CodeFor(rc), what + ": " + Describe(raw, rc));
    sqlite3_close_v2(raw);
    return status;
  }
  std::unique_ptr<Database> db(new Database(raw, path));
  sqlite3_extended_result_codes(raw, 1);
  sqlite3_busy_timeout(raw, static_cast<int>(std::min<int64_t>(options.busy_timeout.count(), INT_MAX)));
  Status status = Configure(*db, options);
  if (!status.ok()) return status.Wrap(what);
  return db;
}

Database::~Database() { sqlite3_close_v2(db_); }

Status Database::Exec(std::string_view sql) {
  if (sql.size() > INT_MAX) {
    return Status::InvalidArgument("sqlite exec: SQL of " + std::to_string(sql.size()) + " bytes");
  }
  const char* next = sql.data();
  const char* const end = sql.data() + sql.size();
  while (next < end) {
    sqlite3_stmt* raw = nullptr;
    const char* tail = nullptr;
    const std::string_view rest(next, static_cast<size_t>(end - next));
    const int rc = sqlite3_prepare_v2(db_, next, static_cast<int>(rest.size()), &raw, &tail);
    if (rc != SQLITE_OK) return SqlError(db_, rc, "prepare", rest);
    if (raw != nullptr) {
      Statement stmt(raw);
      FR_RETURN_IF_ERROR(stmt.Run());
    }
    if (tail == nullptr || tail <= next) break;  // nothing consumed: only whitespace or comments left
    next = tail;
  }
  return Status::Ok();
}

Result<Statement> Database::Prepare(std::string_view sql) {
  if (sql.size() > INT_MAX) {
    return Status::InvalidArgument("sqlite prepare: SQL of " + std::to_string(sql.size()) + " bytes");
  }
  if (sql.empty()) return Status::InvalidArgument("sqlite prepare: empty SQL");
  sqlite3_stmt* raw = nullptr;
  const char* tail = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &raw, &tail);
  if (rc != SQLITE_OK) return SqlError(db_, rc, "prepare", sql);
  if (raw == nullptr) return Status::InvalidArgument("sqlite prepare \"" + Snippet(sql) + "\": no statement");
  Statement stmt(raw);
  // Whatever follows the first statement must compile to nothing (whitespace,
  // comments); a second statement would otherwise be dropped unnoticed.
  const std::string_view rest(tail, static_cast<size_t>(sql.data() + sql.size() - tail));
  sqlite3_stmt* extra = nullptr;
  rc = sqlite3_prepare_v2(db_, rest.data(), static_cast<int>(rest.size()), &extra, nullptr);
  sqlite3_finalize(extra);
  if (rc != SQLITE_OK || extra != nullptr) {
    return Status::InvalidArgument("sqlite prepare \"" + Snippet(sql) + "\": more than one statement (at \"" +
                                   Snippet(rest) + "\")");
  }
  return stmt;
}

int64_t Database::LastInsertRowId() const { return sqlite3_last_insert_rowid(db_); }

int64_t Database::Changes() const { return sqlite3_changes64(db_); }

bool Database::InTransaction() const { return sqlite3_get_autocommit(db_) == 0; }

// ---- Statement ----

Statement::Statement(Statement&& other) noexcept : stmt_(std::exchange(other.stmt_, nullptr)) {}

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    sqlite3_finalize(stmt_);
    stmt_ = std::exchange(other.stmt_, nullptr);
  }
  return *this;
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

Status Statement::BindResult(int rc, int index) const {
  if (rc == SQLITE_OK) return Status::Ok();
  return Status(CodeFor(rc), "sqlite bind parameter " + std::to_string(index) + " of \"" + Snippet(sql()) +
                                 "\": " + sqlite3_errstr(rc));
}

Status Statement::Bind(int index, int64_t value) {
  return BindResult(sqlite3_bind_int64(stmt_, index, value), index);
}

Status Statement::Bind(int index, double value) {
  return BindResult(sqlite3_bind_double(stmt_, index, value), index);
}

Status Statement::Bind(int index, std::string_view text) {
  // A null data pointer would bind NULL; an empty string must stay a string.
  const char* data = text.data() != nullptr ? text.data() : "";
  return BindResult(sqlite3_bind_text64(stmt_, index, data, text.size(), SQLITE_TRANSIENT, SQLITE_UTF8), index);
}

Status Statement::Bind(int index, std::span<const uint8_t> blob) {
  // As with text, a null pointer would bind NULL, so empty gets its own call.
  if (blob.empty()) return BindResult(sqlite3_bind_zeroblob(stmt_, index, 0), index);
  return BindResult(sqlite3_bind_blob64(stmt_, index, blob.data(), blob.size(), SQLITE_TRANSIENT), index);
}

Status Statement::Bind(int index, std::nullptr_t) { return BindResult(sqlite3_bind_null(stmt_, index), index); }

Result<int> Statement::ParameterIndex(std::string_view name) const {
  const std::string terminated(name);
  const int index = sqlite3_bind_parameter_index(stmt_, terminated.c_str());
  if (index == 0) {
    return Status::InvalidArgument("sqlite bind: no parameter \"" + terminated + "\" in \"" + Snippet(sql()) + "\"");
  }
  return index;
}

Result<bool> Statement::Step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  Status status = SqlError(sqlite3_db_handle(stmt_), rc, "step", sql());
  sqlite3_reset(stmt_);
  return status;
}

Status Statement::Run() {
  while (true) {
    FR_ASSIGN_OR_RETURN(bool row, Step());
    if (!row) return Status::Ok();
  }
}

int Statement::ColumnCount() const { return sqlite3_column_count(stmt_); }

bool Statement::IsNull(int column) const { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }

int64_t Statement::ColumnInt64(int column) const { return sqlite3_column_int64(stmt_, column); }

double Statement::ColumnDouble(int column) const { return sqlite3_column_double(stmt_, column); }

std::string Statement::ColumnText(int column) const {
  // column_text before column_bytes: the byte count is of the converted text.
  const unsigned char* text = sqlite3_column_text(stmt_, column);
  const int size = sqlite3_column_bytes(stmt_, column);
  if (text == nullptr) return std::string();
  return std::string(reinterpret_cast<const char*>(text), static_cast<size_t>(size));
}

std::vector<uint8_t> Statement::ColumnBlob(int column) const {
  const auto* data = static_cast<const uint8_t*>(sqlite3_column_blob(stmt_, column));
  const int size = sqlite3_column_bytes(stmt_, column);
  if (data == nullptr) return {};
  return std::vector<uint8_t>(data, data + size);
}

void Statement::Reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

std::string_view Statement::sql() const {
  const char* text = sqlite3_sql(stmt_);
  return text != nullptr ? std::string_view(text) : std::string_view();
}

// ---- Transaction ----

Result<Transaction> Transaction::Begin(Database& db) {
  FR_RETURN_IF_ERROR(db.Exec("BEGIN IMMEDIATE"));
  return Transaction(&db);
}

Transaction::Transaction(Transaction&& other) noexcept : db_(std::exchange(other.db_, nullptr)) {}

Transaction::~Transaction() {
  if (db_ == nullptr || !db_->InTransaction()) return;
  Status status = db_->Exec("ROLLBACK");
  if (!status.ok()) log::Warn("sqlite rollback failed", {{"path", db_->path()}, {"error", status.ToString()}});
}

Status Transaction::Commit() {
  if (db_ == nullptr) return Status::FailedPrecondition("sqlite commit: transaction already committed");
  Status status = db_->Exec("COMMIT");
  // A failed COMMIT may leave the transaction open (the destructor rolls it
  // back) or may already have rolled it back.
  if (status.ok() || !db_->InTransaction()) db_ = nullptr;
  return status;
}

// ---- Migrations ----

Result<int> SchemaVersion(Database& db) {
  FR_ASSIGN_OR_RETURN(Statement stmt, db.Prepare("PRAGMA user_version"));
  FR_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return Status::Internal("sqlite: PRAGMA user_version returned no row for " + db.path());
  return static_cast<int>(stmt.ColumnInt64(0));
}

namespace {

// Fails when the schema has a dangling foreign key (enforcement being off).
Status CheckForeignKeys(Database& db) {
  FR_ASSIGN_OR_RETURN(Statement stmt, db.Prepare("PRAGMA foreign_key_check"));
  FR_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return Status::Ok();
  return Status::FailedPrecondition("foreign key violation: row " + stmt.ColumnText(1) + " of table " +
                                    stmt.ColumnText(0) + " references missing " + stmt.ColumnText(2));
}

// Applies the migrations above `current`, each in its own transaction.
Status ApplyPending(Database& db, const std::vector<Migration>& migrations, int current) {
  const int latest = static_cast<int>(migrations.size());
  for (const Migration& migration : migrations) {
    if (migration.version <= current) continue;
    FR_ASSIGN_OR_RETURN(Transaction txn, Transaction::Begin(db));
    // Another process may have migrated between the caller's read and taking
    // the write lock; under the lock the version is final.
    FR_ASSIGN_OR_RETURN(current, SchemaVersion(db));
    if (current > latest) return NewerSchemaError(db, current, latest);
    if (migration.version <= current) continue;
    const std::string what = "migrate " + db.path() + " to schema version " + std::to_string(migration.version);
    Status status = db.Exec(migration.sql);
    if (status.ok()) status = CheckForeignKeys(db);
    if (status.ok()) status = db.Exec("PRAGMA user_version = " + std::to_string(migration.version));
    if (status.ok()) status = txn.Commit();
    if (!status.ok()) return status.Wrap(what);
    current = migration.version;
    log::Info("sqlite schema migrated", {{"path", db.path()}, {"version", current}});
  }
  return Status::Ok();
}

}  // namespace

Status Migrate(Database& db, const std::vector<Migration>& migrations) {
  for (size_t i = 0; i < migrations.size(); ++i) {
    if (migrations[i].version != static_cast<int>(i) + 1) {
      return Status::InvalidArgument("sqlite migrations: entry " + std::to_string(i) + " has version " +
                                     std::to_string(migrations[i].version) + ", expected " +
                                     std::to_string(i + 1));
    }
  }
  const int latest = static_cast<int>(migrations.size());
  FR_ASSIGN_OR_RETURN(int current, SchemaVersion(db));
  if (current > latest) return NewerSchemaError(db, current, latest);
  if (current == latest) return Status::Ok();
  // SQLite's table-rebuild procedure needs foreign-key enforcement off
  // (DROP TABLE of a parent would otherwise cascade into its children), and
  // the setting cannot change inside a transaction. Each migration is
  // checked with foreign_key_check instead before it commits.
  FR_RETURN_IF_ERROR(db.Exec("PRAGMA foreign_keys=OFF"));
  Status status = ApplyPending(db, migrations, current);
  Status restored = db.Exec("PRAGMA foreign_keys=ON");
  return status.ok() ? restored : status;
}

}  // namespace flashroll::sqlite
