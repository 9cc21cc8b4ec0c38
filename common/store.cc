#include "common/store.h"

#include <chrono>
#include <cstring>
#include <optional>
#include <utility>

namespace flashroll::store {
namespace {

using sqlite::Database;
using sqlite::Statement;
using sqlite::Transaction;

// Schema version 1. Times are Unix milliseconds (UTC); JSON columns are
// checked with json_valid so that garbage fails at write time, not when the
// trainer reads it. Every foreign-key column leads some index, so cascading
// deletes and "rows of X" lookups never scan.
constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE jobs (
  id            INTEGER PRIMARY KEY,
  name          TEXT NOT NULL UNIQUE,
  config_yaml   TEXT NOT NULL,
  status        TEXT NOT NULL CHECK (status IN ('running', 'paused', 'completed', 'failed')),
  created_at_ms INTEGER NOT NULL,
  updated_at_ms INTEGER NOT NULL
);

CREATE TABLE tasks (
  id            INTEGER PRIMARY KEY,
  job_id        INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
  family        TEXT NOT NULL,
  source_key    TEXT NOT NULL,
  problem_json  TEXT NOT NULL CHECK (json_valid(problem_json)),
  verifier_json TEXT NOT NULL CHECK (json_valid(verifier_json)),
  difficulty    REAL,
  created_at_ms INTEGER NOT NULL,
  UNIQUE (job_id, family, source_key)
);

CREATE TABLE samples (
  id                   INTEGER PRIMARY KEY,
  job_id               INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
  task_id              INTEGER NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
  group_id             INTEGER NOT NULL,
  effort               INTEGER NOT NULL CHECK (effort BETWEEN 1 AND 100),
  scaffold             TEXT NOT NULL,
  status               TEXT NOT NULL
                       CHECK (status IN ('queued', 'running', 'completed', 'failed', 'aborted')),
  first_policy_version INTEGER,
  last_policy_version  INTEGER,
  reward               REAL,
  advantage            REAL,
  reasoning_tokens     INTEGER,
  total_tokens         INTEGER,
  error                TEXT,
  queued_at_ms         INTEGER NOT NULL,
  started_at_ms        INTEGER,
  finished_at_ms       INTEGER,
  generate_ms          INTEGER,
  tool_ms              INTEGER,
  verify_ms            INTEGER
);
CREATE INDEX samples_job_status ON samples (job_id, status);
CREATE INDEX samples_job_group ON samples (job_id, group_id);
CREATE INDEX samples_task ON samples (task_id);

CREATE TABLE turns (
  sample_id        INTEGER NOT NULL REFERENCES samples (id) ON DELETE CASCADE,
  turn_index       INTEGER NOT NULL CHECK (turn_index >= 0),
  role             TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
  token_ids        BLOB NOT NULL
                   CHECK (typeof(token_ids) = 'blob' AND length(token_ids) % 4 = 0),
  policy_versions  BLOB
                   CHECK (policy_versions IS NULL OR (typeof(policy_versions) = 'blob'
                          AND length(policy_versions) = length(token_ids))),
  text             TEXT NOT NULL,
  tool_call_json   TEXT CHECK (tool_call_json IS NULL OR json_valid(tool_call_json)),
  tool_result_json TEXT CHECK (tool_result_json IS NULL OR json_valid(tool_result_json)),
  PRIMARY KEY (sample_id, turn_index)
);

CREATE TABLE weight_versions (
  job_id        INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
  version       INTEGER NOT NULL CHECK (version >= 0),
  path          TEXT NOT NULL,
  created_at_ms INTEGER NOT NULL,
  PRIMARY KEY (job_id, version)
) WITHOUT ROWID;

CREATE TABLE sandbox_events (
  id          INTEGER PRIMARY KEY,
  sandbox_id  TEXT NOT NULL,
  sample_id   INTEGER REFERENCES samples (id) ON DELETE SET NULL,
  kind        TEXT NOT NULL,
  detail_json TEXT NOT NULL CHECK (json_valid(detail_json)),
  at_ms       INTEGER NOT NULL
);
CREATE INDEX sandbox_events_sandbox ON sandbox_events (sandbox_id, at_ms);
CREATE INDEX sandbox_events_sample ON sandbox_events (sample_id) WHERE sample_id IS NOT NULL;
CREATE INDEX sandbox_events_kind ON sandbox_events (kind, at_ms);
)sql";

// Version 2: what a trainer needs per token besides the ids — the raw
// logprob the engine recorded and the loss mask the scheduler decided — and
// the parts a sample's reward is made of.
constexpr const char* kSchemaV2 = R"sql(
ALTER TABLE turns ADD COLUMN logprobs BLOB
  CHECK (logprobs IS NULL OR (typeof(logprobs) = 'blob' AND length(logprobs) = length(token_ids)));
ALTER TABLE turns ADD COLUMN loss_mask BLOB
  CHECK (loss_mask IS NULL OR (typeof(loss_mask) = 'blob' AND 4 * length(loss_mask) = length(token_ids)));
ALTER TABLE samples ADD COLUMN reward_parts_json TEXT
  CHECK (reward_parts_json IS NULL OR json_valid(reward_parts_json));
)sql";

// Version 3: named slots and what was trained. `slot` (0..G-1 within the
// group) is stored at dispatch, so a resumed group re-runs exactly its
// missing slots; at most one finished attempt per slot (the unique index). A
// retried attempt is kept as 'superseded' (status gains that value, hence the
// rebuild: SQLite cannot alter a CHECK). `trained_at_version` is the weight
// version whose weights computed the loss that consumed the sample. Finished
// samples of an older store get slots 0, 1, ... in id order.
constexpr const char* kSchemaV3 = R"sql(
CREATE TABLE samples_v3 (
  id                   INTEGER PRIMARY KEY,
  job_id               INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
  task_id              INTEGER NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
  group_id             INTEGER NOT NULL,
  slot                 INTEGER CHECK (slot IS NULL OR slot >= 0),
  effort               INTEGER NOT NULL CHECK (effort BETWEEN 1 AND 100),
  scaffold             TEXT NOT NULL,
  status               TEXT NOT NULL
                       CHECK (status IN ('queued', 'running', 'completed', 'failed', 'aborted', 'superseded')),
  first_policy_version INTEGER,
  last_policy_version  INTEGER,
  reward               REAL,
  advantage            REAL,
  reasoning_tokens     INTEGER,
  total_tokens         INTEGER,
  error                TEXT,
  queued_at_ms         INTEGER NOT NULL,
  started_at_ms        INTEGER,
  finished_at_ms       INTEGER,
  generate_ms          INTEGER,
  tool_ms              INTEGER,
  verify_ms            INTEGER,
  reward_parts_json    TEXT CHECK (reward_parts_json IS NULL OR json_valid(reward_parts_json)),
  trained_at_version   INTEGER CHECK (trained_at_version IS NULL OR trained_at_version >= 0)
);
INSERT INTO samples_v3 (id, job_id, task_id, group_id, slot, effort, scaffold, status, first_policy_version,
                        last_policy_version, reward, advantage, reasoning_tokens, total_tokens, error, queued_at_ms,
                        started_at_ms, finished_at_ms, generate_ms, tool_ms, verify_ms, reward_parts_json)
  SELECT s.id, s.job_id, s.task_id, s.group_id,
         CASE WHEN s.status IN ('completed', 'failed') THEN
           (SELECT count(*) FROM samples o WHERE o.job_id = s.job_id AND o.group_id = s.group_id
              AND o.status IN ('completed', 'failed') AND o.id < s.id) END,
         s.effort, s.scaffold, s.status, s.first_policy_version, s.last_policy_version, s.reward, s.advantage,
         s.reasoning_tokens, s.total_tokens, s.error, s.queued_at_ms, s.started_at_ms, s.finished_at_ms,
         s.generate_ms, s.tool_ms, s.verify_ms, s.reward_parts_json
  FROM samples s;
DROP TABLE samples;
ALTER TABLE samples_v3 RENAME TO samples;
CREATE INDEX samples_job_status ON samples (job_id, status);
CREATE INDEX samples_job_group ON samples (job_id, group_id);
CREATE INDEX samples_task ON samples (task_id);
CREATE UNIQUE INDEX samples_finished_slot ON samples (job_id, group_id, slot)
  WHERE status IN ('completed', 'failed');
)sql";

// Version 4: an ack is recorded at once. `acked_at_version` is the version
// whose weights computed the loss (the lease's trainer_version) and
// `acked_into_version` the version whose checkpoint will hold that update;
// `trained_at_version` follows only once a checkpoint of a version >=
// acked_into_version is durable (published). An ack no durable checkpoint
// holds is cleared when its groups are served again.
constexpr const char* kSchemaV4 = R"sql(
ALTER TABLE samples ADD COLUMN acked_at_version INTEGER
  CHECK (acked_at_version IS NULL OR acked_at_version >= 0);
ALTER TABLE samples ADD COLUMN acked_into_version INTEGER
  CHECK (acked_into_version IS NULL OR (acked_at_version IS NOT NULL AND acked_into_version > acked_at_version));
CREATE INDEX samples_job_acked ON samples (job_id, acked_into_version) WHERE acked_into_version IS NOT NULL;
)sql";

// Version 5: infrastructure failures kept apart. `failure_kind` names why a
// failed sample's failure was no outcome of the agent's (rollout/
// failure_kind.h; NULL otherwise, and for every older sample). The sandbox
// manager's event names are stored as it names them: its init's exit was
// stored as pid1_exit.
constexpr const char* kSchemaV5 = R"sql(
ALTER TABLE samples ADD COLUMN failure_kind TEXT;
UPDATE sandbox_events SET kind = 'init_exit' WHERE kind = 'pid1_exit';
)sql";

// Version 6: what the engine computed for a sample's episode in prefill
// passes, and of that recomputed (NULL for older samples).
constexpr const char* kSchemaV6 = R"sql(
ALTER TABLE samples ADD COLUMN prefill_tokens INTEGER CHECK (prefill_tokens IS NULL OR prefill_tokens >= 0);
ALTER TABLE samples ADD COLUMN reprefill_tokens INTEGER
  CHECK (reprefill_tokens IS NULL OR (reprefill_tokens >= 0 AND reprefill_tokens <= prefill_tokens));
)sql";

// int32 little-endian, whatever the host order, so a store file moves
// between machines.
std::vector<uint8_t> EncodeInt32s(std::span<const int32_t> values) {
  std::vector<uint8_t> bytes(values.size() * 4);
  for (size_t i = 0; i < values.size(); ++i) {
    const auto v = static_cast<uint32_t>(values[i]);
    bytes[4 * i] = static_cast<uint8_t>(v);
    bytes[4 * i + 1] = static_cast<uint8_t>(v >> 8);
    bytes[4 * i + 2] = static_cast<uint8_t>(v >> 16);
    bytes[4 * i + 3] = static_cast<uint8_t>(v >> 24);
  }
  return bytes;
}

Result<std::vector<int32_t>> DecodeInt32s(const std::vector<uint8_t>& bytes, std::string_view what) {
  if (bytes.size() % 4 != 0) {
    return Status::Corruption(std::string(what) + ": blob of " + std::to_string(bytes.size()) +
                              " bytes is not a whole number of int32");
  }
  std::vector<int32_t> values(bytes.size() / 4);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint32_t v = uint32_t{bytes[4 * i]} | uint32_t{bytes[4 * i + 1]} << 8 |
                       uint32_t{bytes[4 * i + 2]} << 16 | uint32_t{bytes[4 * i + 3]} << 24;
    values[i] = static_cast<int32_t>(v);
  }
  return values;
}

// float32 as its IEEE bits, little-endian like the int32 blobs.
std::vector<uint8_t> EncodeFloats(std::span<const float> values) {
  std::vector<int32_t> bits(values.size());
  if (!values.empty()) std::memcpy(bits.data(), values.data(), values.size() * 4);  // data() may be null when empty
  return EncodeInt32s(bits);
}

Result<std::vector<float>> DecodeFloats(const std::vector<uint8_t>& bytes, std::string_view what) {
  FR_ASSIGN_OR_RETURN(std::vector<int32_t> bits, DecodeInt32s(bytes, what));
  std::vector<float> values(bits.size());
  if (!bits.empty()) std::memcpy(values.data(), bits.data(), bits.size() * 4);
  return values;
}

Result<TurnRole> ParseTurnRole(std::string_view name) {
  for (TurnRole role : {TurnRole::kSystem, TurnRole::kUser, TurnRole::kAssistant, TurnRole::kTool}) {
    if (name == TurnRoleName(role)) return role;
  }
  return Status::Corruption("unknown turn role \"" + std::string(name) + "\"");
}

bool IsFinal(SampleStatus status) {
  return status == SampleStatus::kCompleted || status == SampleStatus::kFailed ||
         status == SampleStatus::kAborted || status == SampleStatus::kSuperseded;
}

// The stored status of a sample; kNotFound when there is no such sample.
Result<std::string> StoredSampleStatus(Database& db, int64_t sample_id) {
  FR_ASSIGN_OR_RETURN(Statement stmt, db.Prepare("SELECT status FROM samples WHERE id = ?1"));
  FR_RETURN_IF_ERROR(stmt.Bind(1, sample_id));
  FR_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return Status::NotFound("no sample " + std::to_string(sample_id));
  return stmt.ColumnText(0);
}

constexpr const char* kInsertTurnSql =
    "INSERT INTO turns (sample_id, turn_index, role, token_ids, policy_versions, text, tool_call_json,"
    " tool_result_json, logprobs, loss_mask) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";

// Binds and runs kInsertTurnSql for one turn; `stmt` is reset for reuse.
Status InsertTurn(Statement& stmt, const Turn& turn) {
  const std::string what = "append turn " + std::to_string(turn.turn_index) + " of sample " +
                           std::to_string(turn.sample_id);
  if (!turn.policy_versions.empty() && turn.policy_versions.size() != turn.token_ids.size()) {
    return Status::InvalidArgument(what + ": " + std::to_string(turn.policy_versions.size()) +
                                   " policy versions for " + std::to_string(turn.token_ids.size()) +
                                   " tokens (want none or one per token)");
  }
  if (!turn.logprobs.empty() && turn.logprobs.size() != turn.token_ids.size()) {
    return Status::InvalidArgument(what + ": " + std::to_string(turn.logprobs.size()) + " logprobs for " +
                                   std::to_string(turn.token_ids.size()) + " tokens (want none or one per token)");
  }
  if (!turn.loss_mask.empty() && turn.loss_mask.size() != turn.token_ids.size()) {
    return Status::InvalidArgument(what + ": " + std::to_string(turn.loss_mask.size()) + " loss-mask entries for " +
                                   std::to_string(turn.token_ids.size()) + " tokens (want none or one per token)");
  }
  stmt.Reset();
  Status status = stmt.Bind(1, turn.sample_id);
  if (status.ok()) status = stmt.Bind(2, turn.turn_index);
  if (status.ok()) status = stmt.Bind(3, TurnRoleName(turn.role));
  if (status.ok()) status = stmt.Bind(4, EncodeInt32s(turn.token_ids));
  if (status.ok()) {
    status = turn.policy_versions.empty() ? stmt.Bind(5, nullptr) : stmt.Bind(5, EncodeInt32s(turn.policy_versions));
  }
  if (status.ok()) status = stmt.Bind(6, turn.text);
  if (status.ok()) status = stmt.Bind(7, turn.tool_call_json);
  if (status.ok()) status = stmt.Bind(8, turn.tool_result_json);
  if (status.ok()) status = turn.logprobs.empty() ? stmt.Bind(9, nullptr) : stmt.Bind(9, EncodeFloats(turn.logprobs));
  if (status.ok()) status = turn.loss_mask.empty() ? stmt.Bind(10, nullptr) : stmt.Bind(10, turn.loss_mask);
  if (status.ok()) status = stmt.Run();
  return status.Wrap(what);
}

}  // namespace

const std::vector<sqlite::Migration>& Migrations() {
  static const std::vector<sqlite::Migration> migrations = {{1, kSchemaV1}, {2, kSchemaV2}, {3, kSchemaV3}, {4, kSchemaV4},
                                                                {5, kSchemaV5}, {6, kSchemaV6}};
  return migrations;
}

Result<std::unique_ptr<Database>> OpenStore(const std::string& path, const sqlite::DatabaseOptions& options) {
  FR_ASSIGN_OR_RETURN(std::unique_ptr<Database> db, Database::Open(path, options));
  FR_RETURN_IF_ERROR(sqlite::Migrate(*db, Migrations()));
  return db;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const char* JobStatusName(JobStatus status) {
  switch (status) {
    case JobStatus::kRunning: return "running";
    case JobStatus::kPaused: return "paused";
    case JobStatus::kCompleted: return "completed";
    case JobStatus::kFailed: return "failed";
  }
  return "unknown";
}

const char* SampleStatusName(SampleStatus status) {
  switch (status) {
    case SampleStatus::kQueued: return "queued";
    case SampleStatus::kRunning: return "running";
    case SampleStatus::kCompleted: return "completed";
    case SampleStatus::kFailed: return "failed";
    case SampleStatus::kAborted: return "aborted";
    case SampleStatus::kSuperseded: return "superseded";
  }
  return "unknown";
}

const char* TurnRoleName(TurnRole role) {
  switch (role) {
    case TurnRole::kSystem: return "system";
    case TurnRole::kUser: return "user";
    case TurnRole::kAssistant: return "assistant";
    case TurnRole::kTool: return "tool";
  }
  return "unknown";
}

const char* SandboxEventKindName(SandboxEventKind kind) {
  switch (kind) {
    case SandboxEventKind::kCreated: return "created";
    case SandboxEventKind::kDestroyed: return "destroyed";
    case SandboxEventKind::kOom: return "oom";
    case SandboxEventKind::kInitExit: return "init_exit";
    case SandboxEventKind::kRootfsDamage: return "rootfs_damage";
    case SandboxEventKind::kTimeout: return "timeout";
    case SandboxEventKind::kTeardownFailed: return "teardown_failed";
  }
  return "unknown";
}

std::optional<SandboxEventKind> ParseSandboxEventKind(std::string_view name) {
  for (SandboxEventKind kind : {SandboxEventKind::kCreated, SandboxEventKind::kDestroyed, SandboxEventKind::kOom,
                                SandboxEventKind::kInitExit, SandboxEventKind::kRootfsDamage, SandboxEventKind::kTimeout,
                                SandboxEventKind::kTeardownFailed}) {
    if (name == SandboxEventKindName(kind)) return kind;
  }
  return std::nullopt;
}

Result<int64_t> CreateJob(Database& db, std::string_view name, std::string_view config_yaml) {
  const std::string what = "create job \"" + std::string(name) + "\"";
  FR_ASSIGN_OR_RETURN(Statement stmt,
                      db.Prepare("INSERT INTO jobs (name, config_yaml, status, created_at_ms, updated_at_ms)"
                                 " VALUES (?1, ?2, 'running', ?3, ?3)"));
  Status status = stmt.Bind(1, name);
  if (status.ok()) status = stmt.Bind(2, config_yaml);
  if (status.ok()) status = stmt.Bind(3, NowMs());
  if (status.ok()) status = stmt.Run();
  if (!status.ok()) return status.Wrap(what);
  return db.LastInsertRowId();
}

Status SetJobStatus(Database& db, int64_t job_id, JobStatus job_status) {
  const std::string what = "set status of job " + std::to_string(job_id);
  FR_ASSIGN_OR_RETURN(Statement stmt, db.Prepare("UPDATE jobs SET status = ?2, updated_at_ms = ?3 WHERE id = ?1"));
  Status status = stmt.Bind(1, job_id);
  if (status.ok()) status = stmt.Bind(2, JobStatusName(job_status));
  if (status.ok()) status = stmt.Bind(3, NowMs());
  if (status.ok()) status = stmt.Run();
  if (!status.ok()) return status.Wrap(what);
  if (db.Changes() == 0) return Status::NotFound(what + ": no such job");
  return Status::Ok();
}

Result<int64_t> InsertTask(Database& db, const NewTask& task) {
  const std::string what = "insert task " + task.family + "/" + task.source_key + " of job " +
                           std::to_string(task.job_id);
  FR_ASSIGN_OR_RETURN(Statement stmt,
                      db.Prepare("INSERT INTO tasks (job_id, family, source_key, problem_json, verifier_json,"
                                 " difficulty, created_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"));
  Status status = stmt.Bind(1, task.job_id);
  if (status.ok()) status = stmt.Bind(2, task.family);
  if (status.ok()) status = stmt.Bind(3, task.source_key);
  if (status.ok()) status = stmt.Bind(4, task.problem_json);
  if (status.ok()) status = stmt.Bind(5, task.verifier_json);
  if (status.ok()) status = stmt.Bind(6, task.difficulty);
  if (status.ok()) status = stmt.Bind(7, NowMs());
  if (status.ok()) status = stmt.Run();
  if (!status.ok()) return status.Wrap(what);
  return db.LastInsertRowId();
}

Result<int64_t> InsertSample(Database& db, const NewSample& sample) {
  const std::string what = "insert sample of task " + std::to_string(sample.task_id);
  if (sample.effort < 1 || sample.effort > 100) {
    return Status::InvalidArgument(what + ": effort " + std::to_string(sample.effort) + " is outside 1..100");
  }
  // The job comes from the task, so a sample can never name another job.
  FR_ASSIGN_OR_RETURN(Statement stmt,
                      db.Prepare("INSERT INTO samples (job_id, task_id, group_id, slot, effort, scaffold, status,"
                                 " queued_at_ms) SELECT job_id, id, ?2, ?6, ?3, ?4, 'queued', ?5 FROM tasks"
                                 " WHERE id = ?1"));
  Status status = stmt.Bind(1, sample.task_id);
  if (status.ok()) status = stmt.Bind(2, sample.group_id);
  if (status.ok()) status = stmt.Bind(3, sample.effort);
  if (status.ok()) status = stmt.Bind(4, sample.scaffold);
  if (status.ok()) status = stmt.Bind(5, NowMs());
  if (status.ok()) status = stmt.Bind(6, sample.slot);
  if (status.ok()) status = stmt.Run();
  if (!status.ok()) return status.Wrap(what);
  if (db.Changes() == 0) return Status::NotFound(what + ": no such task");
  return db.LastInsertRowId();
}

Status StartSample(Database& db, int64_t sample_id) {
  const std::string what = "start sample " + std::to_string(sample_id);
  FR_ASSIGN_OR_RETURN(Statement stmt, db.Prepare("UPDATE samples SET status = 'running', started_at_ms = ?2"
                                                 " WHERE id = ?1 AND status = 'queued'"));
  Status status = stmt.Bind(1, sample_id);
  if (status.ok()) status = stmt.Bind(2, NowMs());
  if (status.ok()) status = stmt.Run();
  if (!status.ok()) return status.Wrap(what);
  if (db.Changes() == 1) return Status::Ok();
  Result<std::string> stored = StoredSampleStatus(db, sample_id);
  if (!stored.ok()) return stored.status().Wrap(what);
  return Status::FailedPrecondition(what + ": sample is " + *stored + ", not queued");
}

Status AppendTurn(Database& db, const Turn& turn) {
  FR_ASSIGN_OR_RETURN(Statement stmt, db.Prepare(kInsertTurnSql));
  return InsertTurn(stmt, turn);
}

Result<std::vector<Turn>> LoadTurns(Database& db, int64_t sample_id) {
  const std::string what = "load turns of sample " + std::to_string(sample_id);
  FR_ASSIGN_OR_RETURN(Statement stmt,
                      db.Prepare("SELECT turn_index, role, token_ids, policy_versions, text, tool_call_json,"
                                 " tool_result_json, logprobs, loss_mask FROM turns WHERE sample_id = ?1 ORDER BY turn_index"));
  FR_RETURN_IF_ERROR(stmt.Bind(1, sample_id));
  std::vector<Turn> turns;
  while (true) {
    Result<bool> row = stmt.Step();
    if (!row.ok()) return row.status().Wrap(what);
    if (!*row) break;
    Turn turn;
    turn.sample_id = sample_id;
    turn.turn_index = static_cast<int>(stmt.ColumnInt64(0));
    const std::string where = what + ": turn " + std::to_string(turn.turn_index);
    Result<TurnRole> role = ParseTurnRole(stmt.ColumnText(1));
    if (!role.ok()) return role.status().Wrap(where);
    turn.role = *role;
    FR_ASSIGN_OR_RETURN(turn.token_ids, DecodeInt32s(stmt.ColumnBlob(2), where + " token_ids"));
    FR_ASSIGN_OR_RETURN(turn.policy_versions, DecodeInt32s(stmt.ColumnBlob(3), where + " policy_versions"));
    turn.text = stmt.ColumnText(4);
    if (!stmt.IsNull(5)) turn.tool_call_json = stmt.ColumnText(5);
    if (!stmt.IsNull(6)) turn.tool_result_json = stmt.ColumnText(6);
    FR_ASSIGN_OR_RETURN(turn.logprobs, DecodeFloats(stmt.ColumnBlob(7), where + " logprobs"));
    turn.loss_mask = stmt.ColumnBlob(8);
    turns.push_back(std::move(turn));
  }
  return turns;
}

Status CompleteSample(Database& db, const SampleOutcome& outcome, std::span<const Turn> turns) {
  const std::string what = "complete sample " + std::to_string(outcome.sample_id);
  if (!IsFinal(outcome.status)) {
    return Status::InvalidArgument(what + ": status " + SampleStatusName(outcome.status) + " is not final");
  }
  Result<Transaction> txn = Transaction::Begin(db);
  if (!txn.ok()) return txn.status().Wrap(what);
  Result<std::string> stored = StoredSampleStatus(db, outcome.sample_id);
  if (!stored.ok()) return stored.status().Wrap(what);
  if (*stored != SampleStatusName(SampleStatus::kQueued) && *stored != SampleStatusName(SampleStatus::kRunning)) {
    return Status::FailedPrecondition(what + ": sample already " + *stored);
  }
  FR_ASSIGN_OR_RETURN(Statement insert, db.Prepare(kInsertTurnSql));
  for (const Turn& turn : turns) {
    if (turn.sample_id != outcome.sample_id) {
      return Status::InvalidArgument(what + ": turn " + std::to_string(turn.turn_index) + " belongs to sample " +
                                     std::to_string(turn.sample_id));
    }
    Status status = InsertTurn(insert, turn);
    if (!status.ok()) return status.Wrap(what);
  }
  FR_ASSIGN_OR_RETURN(Statement update,
                      db.Prepare("UPDATE samples SET status = ?2, reward = ?3, first_policy_version = ?4,"
                                 " last_policy_version = ?5, reasoning_tokens = ?6, total_tokens = ?7, error = ?8,"
                                 " finished_at_ms = ?9, generate_ms = ?10, tool_ms = ?11, verify_ms = ?12, reward_parts_json = ?13,"
                                 " failure_kind = ?14, prefill_tokens = ?15, reprefill_tokens = ?16 WHERE id = ?1"));
  Status status = update.Bind(1, outcome.sample_id);
  if (status.ok()) status = update.Bind(2, SampleStatusName(outcome.status));
  if (status.ok()) status = update.Bind(3, outcome.reward);
  if (status.ok()) status = update.Bind(4, outcome.first_policy_version);
  if (status.ok()) status = update.Bind(5, outcome.last_policy_version);
  if (status.ok()) status = update.Bind(6, outcome.reasoning_tokens);
  if (status.ok()) status = update.Bind(7, outcome.total_tokens);
  if (status.ok()) {
    status = outcome.error.empty() ? update.Bind(8, nullptr) : update.Bind(8, outcome.error);
  }
  if (status.ok()) status = update.Bind(9, NowMs());
  if (status.ok()) status = update.Bind(10, outcome.generate_ms);
  if (status.ok()) status = update.Bind(11, outcome.tool_ms);
  if (status.ok()) status = update.Bind(12, outcome.verify_ms);
  if (status.ok()) {
    status = outcome.reward_parts_json.empty() ? update.Bind(13, nullptr) : update.Bind(13, outcome.reward_parts_json);
  }
  if (status.ok()) {
    status = outcome.failure_kind.empty() ? update.Bind(14, nullptr) : update.Bind(14, outcome.failure_kind);
  }
  if (status.ok()) status = update.Bind(15, outcome.prefill_tokens);
  if (status.ok()) status = update.Bind(16, outcome.reprefill_tokens);
  if (status.ok()) status = update.Run();
  if (status.ok()) status = txn->Commit();
  return status.Wrap(what);
}

Result<JobTokenTotals> LoadJobTokenTotals(Database& db, int64_t job_id) {
  FR_ASSIGN_OR_RETURN(Statement stmt,
                      db.Prepare("SELECT COALESCE(SUM(prefill_tokens), 0), COALESCE(SUM(reprefill_tokens), 0),"
                                 " COALESCE(SUM(CASE WHEN acked_at_version IS NOT NULL OR trained_at_version IS NOT NULL"
                                 " THEN total_tokens END), 0) FROM samples WHERE job_id = ?1"));
  FR_RETURN_IF_ERROR(stmt.Bind(1, job_id));
  FR_ASSIGN_OR_RETURN(bool row, stmt.Step());
  JobTokenTotals totals;
  if (row) {
    totals.prefill_tokens = stmt.ColumnInt64(0);
    totals.reprefill_tokens = stmt.ColumnInt64(1);
    totals.trained_tokens = stmt.ColumnInt64(2);
  }
  return totals;
}

Status RecordAdvantages(Database& db, std::span<const SampleAdvantage> advantages) {
  Result<Transaction> txn = Transaction::Begin(db);
  if (!txn.ok()) return txn.status().Wrap("record advantages");
  FR_ASSIGN_OR_RETURN(Statement stmt,
                      db.Prepare("UPDATE samples SET advantage = ?2 WHERE id = ?1 AND status = 'completed'"));
  for (const SampleAdvantage& a : advantages) {
    const std::string what = "record advantage of sample " + std::to_string(a.sample_id);
    stmt.Reset();
    Status status = stmt.Bind(1, a.sample_id);
    if (status.ok()) status = stmt.Bind(2, a.advantage);
    if (status.ok()) status = stmt.Run();
    if (!status.ok()) return status.Wrap(what);
    if (db.Changes() == 0) return Status::FailedPrecondition(what + ": no completed sample with that id");
  }
  return txn->Commit().Wrap("record advantages");
}

Status SupersedeUnfinished(Database& db, int64_t job_id) {
  const std::string what = "supersede the unfinished samples of job " + std::to_string(job_id);
  FR_ASSIGN_OR_RETURN(Statement stmt,
                      db.Prepare("UPDATE samples SET status = 'superseded', finished_at_ms = coalesce(finished_at_ms, ?2),"
                                 " error = coalesce(error, 'interrupted: the job stopped before the sample finished')"
                                 " WHERE job_id = ?1 AND status IN ('queued', 'running', 'aborted')"));
  Status status = stmt.Bind(1, job_id);
  if (status.ok()) status = stmt.Bind(2, NowMs());
  if (status.ok()) status = stmt.Run();
  return status.Wrap(what);
}

Status RecordTrained(Database& db, std::span<const TrainedSample> samples, int64_t version) {
  const std::string what = "record samples trained at version " + std::to_string(version);
  // Inside the caller's transaction when one is open (the record of a
  // published version and what it made durable commit together).
  std::optional<Transaction> own;
  if (!db.InTransaction()) {
    Result<Transaction> txn = Transaction::Begin(db);
    if (!txn.ok()) return txn.status().Wrap(what);
    own.emplace(std::move(*txn));
  }
  FR_ASSIGN_OR_RETURN(Statement sample_stmt,
                      db.Prepare("UPDATE samples SET trained_at_version = ?2 WHERE id = ?1"
                                 " AND trained_at_version IS NULL AND status IN ('completed', 'failed')"));
  FR_ASSIGN_OR_RETURN(Statement turn_stmt,
                      db.Prepare("UPDATE turns SET loss_mask = ?3 WHERE sample_id = ?1 AND turn_index = ?2"
                                 " AND length(token_ids) = 4 * length(?3)"));
  for (const TrainedSample& sample : samples) {
    const std::string where = what + ": sample " + std::to_string(sample.sample_id);
    sample_stmt.Reset();
    Status status = sample_stmt.Bind(1, sample.sample_id);
    if (status.ok()) status = sample_stmt.Bind(2, version);
    if (status.ok()) status = sample_stmt.Run();
    if (!status.ok()) return status.Wrap(where);
    if (db.Changes() == 0) continue;  // recorded before (a retried ack), or not a finished sample
    for (const auto& [turn_index, mask] : sample.loss_masks) {
      turn_stmt.Reset();
      status = turn_stmt.Bind(1, sample.sample_id);
      if (status.ok()) status = turn_stmt.Bind(2, turn_index);
      if (status.ok()) status = turn_stmt.Bind(3, std::span<const uint8_t>(mask));
      if (status.ok()) status = turn_stmt.Run();
      if (!status.ok()) return status.Wrap(where);
      if (db.Changes() == 0) {
        return Status::InvalidArgument(where + ": no turn " + std::to_string(turn_index) + " of " +
                                       std::to_string(mask.size()) + " tokens");
      }
    }
  }
  return own ? own->Commit().Wrap(what) : Status::Ok();
}

Status RecordAcked(Database& db, std::span<const int64_t> sample_ids, int64_t at_version, int64_t into_version) {
  const std::string what = "record samples acked at version " + std::to_string(at_version) + " into version " +
                           std::to_string(into_version);
  if (at_version < 0 || into_version <= at_version) {
    return Status::InvalidArgument(what + ": the update must go into a version above the one that trained it");
  }
  Result<Transaction> txn = Transaction::Begin(db);
  if (!txn.ok()) return txn.status().Wrap(what);
  FR_ASSIGN_OR_RETURN(Statement stmt,
                      db.Prepare("UPDATE samples SET acked_at_version = ?2, acked_into_version = ?3 WHERE id = ?1"
                                 " AND trained_at_version IS NULL AND status IN ('completed', 'failed')"));
  for (int64_t id : sample_ids) {
    stmt.Reset();
    Status status = stmt.Bind(1, id);
    if (status.ok()) status = stmt.Bind(2, at_version);
    if (status.ok()) status = stmt.Bind(3, into_version);
    if (status.ok()) status = stmt.Run();
    if (!status.ok()) return status.Wrap(what + ": sample " + std::to_string(id));
  }
  return txn->Commit().Wrap(what);
}

Result<std::vector<AckedSample>> AckedUpTo(Database& db, int64_t job_id, int64_t version) {
  FR_ASSIGN_OR_RETURN(Statement stmt,
                      db.Prepare("SELECT id, acked_at_version FROM samples WHERE job_id = ?1"
                                 " AND acked_into_version <= ?2 AND trained_at_version IS NULL ORDER BY id"));
  FR_RETURN_IF_ERROR(stmt.Bind(1, job_id));
  FR_RETURN_IF_ERROR(stmt.Bind(2, version));
  std::vector<AckedSample> acked;
  while (true) {
    FR_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    acked.push_back({stmt.ColumnInt64(0), stmt.ColumnInt64(1)});
  }
  return acked;
}

Result<std::vector<int64_t>> ForgetUndurableAcks(Database& db, int64_t job_id, int64_t durable_version) {
  const std::string what = "forget the acks of job " + std::to_string(job_id) + " above version " +
                           std::to_string(durable_version);
  Result<Transaction> txn = Transaction::Begin(db);
  if (!txn.ok()) return txn.status().Wrap(what);
  std::vector<int64_t> groups;
  {
    FR_ASSIGN_OR_RETURN(Statement select,
                        db.Prepare("SELECT DISTINCT group_id FROM samples WHERE job_id = ?1"
                                   " AND acked_into_version > ?2 AND trained_at_version IS NULL ORDER BY group_id"));
    FR_RETURN_IF_ERROR(select.Bind(1, job_id));
    FR_RETURN_IF_ERROR(select.Bind(2, durable_version));
    while (true) {
      FR_ASSIGN_OR_RETURN(bool row, select.Step());
      if (!row) break;
      groups.push_back(select.ColumnInt64(0));
    }
  }
  FR_ASSIGN_OR_RETURN(Statement clear,
                      db.Prepare("UPDATE samples SET acked_at_version = NULL, acked_into_version = NULL"
                                 " WHERE job_id = ?1 AND acked_into_version > ?2 AND trained_at_version IS NULL"));
  Status status = clear.Bind(1, job_id);
  if (status.ok()) status = clear.Bind(2, durable_version);
  if (status.ok()) status = clear.Run();
  if (!status.ok()) return status.Wrap(what);
  FR_RETURN_IF_ERROR(txn->Commit().Wrap(what));
  return groups;
}

Result<std::optional<PublishedVersion>> LatestWeightVersion(Database& db, int64_t job_id) {
  FR_ASSIGN_OR_RETURN(Statement stmt, db.Prepare("SELECT version, path FROM weight_versions WHERE job_id = ?1"
                                                 " ORDER BY version DESC LIMIT 1"));
  FR_RETURN_IF_ERROR(stmt.Bind(1, job_id));
  FR_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return std::optional<PublishedVersion>();
  return std::optional<PublishedVersion>(PublishedVersion{stmt.ColumnInt64(0), std::string(stmt.ColumnText(1))});
}

Result<std::optional<std::string>> WeightVersionPath(Database& db, int64_t job_id, int64_t version) {
  FR_ASSIGN_OR_RETURN(Statement stmt, db.Prepare("SELECT path FROM weight_versions WHERE job_id = ?1 AND version = ?2"));
  FR_RETURN_IF_ERROR(stmt.Bind(1, job_id));
  FR_RETURN_IF_ERROR(stmt.Bind(2, version));
  FR_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return std::optional<std::string>();
  return std::optional<std::string>(std::string(stmt.ColumnText(0)));
}

Status RecordWeightVersion(Database& db, int64_t job_id, int64_t version, std::string_view path) {
  const std::string what = "record weight version " + std::to_string(version) + " of job " + std::to_string(job_id);
  FR_ASSIGN_OR_RETURN(Statement stmt, db.Prepare("INSERT INTO weight_versions (job_id, version, path, created_at_ms)"
                                                 " VALUES (?1, ?2, ?3, ?4)"));
  Status status = stmt.Bind(1, job_id);
  if (status.ok()) status = stmt.Bind(2, version);
  if (status.ok()) status = stmt.Bind(3, path);
  if (status.ok()) status = stmt.Bind(4, NowMs());
  if (status.ok()) status = stmt.Run();
  return status.Wrap(what);
}

Result<int64_t> RecordSandboxEvent(Database& db, const SandboxEvent& event) {
  const std::string what = std::string("record sandbox event ") + SandboxEventKindName(event.kind) + " of " +
                           event.sandbox_id;
  FR_ASSIGN_OR_RETURN(Statement stmt, db.Prepare("INSERT INTO sandbox_events (sandbox_id, sample_id, kind,"
                                                 " detail_json, at_ms) VALUES (?1, ?2, ?3, ?4, ?5)"));
  Status status = stmt.Bind(1, event.sandbox_id);
  if (status.ok()) status = stmt.Bind(2, event.sample_id);
  if (status.ok()) status = stmt.Bind(3, SandboxEventKindName(event.kind));
  if (status.ok()) status = stmt.Bind(4, event.detail_json);
  if (status.ok()) status = stmt.Bind(5, NowMs());
  if (status.ok()) status = stmt.Run();
  if (!status.ok()) return status.Wrap(what);
  return db.LastInsertRowId();
}

}  // namespace flashroll::store
