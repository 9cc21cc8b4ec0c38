// The Flashroll store: one SQLite file that records an RL job — its tasks,
// every sample and its trajectory (token ids with the policy version of each
// sampled token), the weight versions the trainer published, and what
// happened to the sandboxes. The schema and the reason for each column are in
// docs/STORE.md; Migrations() is the schema itself.
//
// The helpers below are the writes the RL job makes. Each is one statement or
// one transaction, so a process killed at any point leaves either all of a
// helper's rows or none. Readers use Database::Prepare directly.
//
// Thread safety: as for sqlite::Database — one connection per thread (open
// the store once per thread or process); connections on the same file may
// run concurrently. The helpers keep no state of their own.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/sqlite.h"
#include "common/status.h"

namespace flashroll::store {

// The schema version this build writes; Migrations().size().
constexpr int kSchemaVersion = 6;

// The store's numbered migrations, oldest first.
const std::vector<sqlite::Migration>& Migrations();

// Opens the store at `path` (creating it if missing) and migrates it to
// kSchemaVersion. Returns the connection, or the error from
// sqlite::Database::Open or sqlite::Migrate (kFailedPrecondition when the
// file was written by a newer build).
Result<std::unique_ptr<sqlite::Database>> OpenStore(const std::string& path,
                                                    const sqlite::DatabaseOptions& options = {});

// Milliseconds since the Unix epoch (UTC): the unit of every *_at_ms column.
int64_t NowMs();

enum class JobStatus { kRunning, kPaused, kCompleted, kFailed };
// kAborted: stopped before it finished (its slot runs again on --resume);
// kSuperseded: an attempt another attempt of its slot replaced (a warm-up
// drop, or an aborted or interrupted attempt once the job resumed).
enum class SampleStatus { kQueued, kRunning, kCompleted, kFailed, kAborted, kSuperseded };
enum class TurnRole { kSystem, kUser, kAssistant, kTool };
// The sandbox manager's event kinds, under its names (sandbox/events.h).
enum class SandboxEventKind { kCreated, kDestroyed, kOom, kInitExit, kRootfsDamage, kTimeout, kTeardownFailed };

// The names stored in the database ("running", "init_exit", ...).
const char* JobStatusName(JobStatus status);
const char* SampleStatusName(SampleStatus status);
const char* TurnRoleName(TurnRole role);
const char* SandboxEventKindName(SandboxEventKind kind);
// The kind named `name` (as the sandbox manager names it), or nullopt.
std::optional<SandboxEventKind> ParseSandboxEventKind(std::string_view name);

// Creates a job in status "running". Returns its id, or kAlreadyExists when
// a job of that name exists (resume it by name instead).
Result<int64_t> CreateJob(sqlite::Database& db, std::string_view name, std::string_view config_yaml);

// Sets a job's status. Returns OK, or kNotFound for an unknown job id.
Status SetJobStatus(sqlite::Database& db, int64_t job_id, JobStatus status);

struct NewTask {
  int64_t job_id = 0;
  std::string family;         // e.g. "math", "swe"
  std::string source_key;     // the task's id within its family; unique per job
  std::string problem_json;   // the prompt or problem, as the family defines it
  std::string verifier_json;  // how to score an answer
  std::optional<double> difficulty;
};

// Adds a task. Returns its id; kAlreadyExists when (job, family, source_key)
// is already stored; kInvalidArgument for an unknown job or invalid JSON.
Result<int64_t> InsertTask(sqlite::Database& db, const NewTask& task);

struct NewSample {
  int64_t task_id = 0;   // the sample belongs to the task's job
  int64_t group_id = 0;  // samples of one group share (task, effort) and are normalised together
  int effort = 100;      // reasoning effort b, 1..100
  std::string scaffold;
  std::optional<int> slot;  // 0..G-1 within the group: at most one finished attempt per slot
};

// Adds a sample in status "queued". Returns its id; kNotFound for an
// unknown task; kInvalidArgument for an effort outside 1..100.
Result<int64_t> InsertSample(sqlite::Database& db, const NewSample& sample);

// Moves a sample from "queued" to "running" and stamps started_at_ms.
// Returns OK, or kFailedPrecondition when the sample is not queued
// (kNotFound when it does not exist).
Status StartSample(sqlite::Database& db, int64_t sample_id);

// One turn of a trajectory, exactly as the engine saw it: no re-tokenising.
struct Turn {
  int64_t sample_id = 0;
  int turn_index = 0;  // 0, 1, 2, ... within the sample
  TurnRole role = TurnRole::kUser;
  std::vector<int32_t> token_ids;
  // Empty for tokens the policy did not sample (prompt, tool output);
  // otherwise the weight version that sampled each token, one per token.
  std::vector<int32_t> policy_versions;
  // Empty, or one per token: the raw logprob the engine recorded (0 where
  // the policy did not sample) and whether the trainer learns from the token.
  std::vector<float> logprobs;
  std::vector<uint8_t> loss_mask;
  std::string text;
  std::optional<std::string> tool_call_json;    // the call parsed from this turn
  std::optional<std::string> tool_result_json;  // the sandbox's result (exit code, truncation, ...)
};

// Appends one turn. Writes one row and opens no transaction: hold a
// sqlite::Transaction around several calls to make them atomic. Returns OK;
// kAlreadyExists when the sample already has this turn index;
// kInvalidArgument for an unknown sample, invalid JSON, or policy_versions,
// logprobs or loss_mask that is neither empty nor one per token.
Status AppendTurn(sqlite::Database& db, const Turn& turn);

// Reads a sample's turns in turn order. Returns them (empty for a sample
// without turns), or kCorruption when a stored token blob is malformed.
Result<std::vector<Turn>> LoadTurns(sqlite::Database& db, int64_t sample_id);

struct SampleOutcome {
  int64_t sample_id = 0;
  SampleStatus status = SampleStatus::kCompleted;  // completed, failed or aborted
  std::optional<double> reward;                    // none when the sample failed before scoring
  std::optional<int32_t> first_policy_version;     // none when no token was sampled
  std::optional<int32_t> last_policy_version;
  int64_t reasoning_tokens = 0;  // the l of the effort length penalty
  int64_t total_tokens = 0;
  std::string error;  // why a failed or aborted sample ended (e.g. "sandbox oom"); empty otherwise
  // Where the sample's wall time went, summed over its turns.
  int64_t generate_ms = 0;
  int64_t tool_ms = 0;
  int64_t verify_ms = 0;
  std::string reward_parts_json;  // e.g. {"verifier": 1, "length": -0.04}; empty = none
  // An infrastructure failure's kind (rollout/failure_kind.h names them;
  // empty = none: the sample's outcome is the agent's).
  std::string failure_kind;
  // What the engine computed for the sample's episode in prefill passes,
  // and of that recomputed (rollout/policy.h PrefillCounts).
  int64_t prefill_tokens = 0, reprefill_tokens = 0;
};

// Finishes a queued or running sample in one transaction: appends `turns`
// (the ones not yet appended), then records the outcome and finished_at_ms.
// A reader sees either none of it or all of it. Opens its own transaction,
// so it must not be called inside one. Returns OK; kInvalidArgument when
// outcome.status is not a final status or a turn names another sample;
// kFailedPrecondition when the sample already finished (kNotFound when it
// does not exist); or AppendTurn's error, with nothing written.
Status CompleteSample(sqlite::Database& db, const SampleOutcome& outcome, std::span<const Turn> turns);

struct SampleAdvantage {
  int64_t sample_id = 0;
  double advantage = 0;
};

// Records group-relative advantages (known once the whole group finished)
// in one transaction (not to be called inside one). Returns OK, or
// kFailedPrecondition naming the first sample that is not completed
// (nothing written).
Status RecordAdvantages(sqlite::Database& db, std::span<const SampleAdvantage> advantages);

// Marks every queued, running or aborted sample of a job superseded: a
// resumed job runs their slots again. Returns OK or the write's error.
Status SupersedeUnfinished(sqlite::Database& db, int64_t job_id);

// A sample the trainer consumed, with the loss mask it trained with per
// assistant turn (turn index -> one byte per token).
struct TrainedSample {
  int64_t sample_id = 0;
  std::vector<std::pair<int, std::vector<uint8_t>>> loss_masks;
};

// Records, in one transaction, that `samples` were trained by the weights of
// `version` (the update that consumed them is durable): trained_at_version
// and the turns' loss_mask, written once — a sample already recorded, or not
// completed or failed, is left as it is. kInvalidArgument naming a turn that
// does not exist or whose mask has another length (nothing written). Runs
// inside the caller's transaction when one is open on `db`.
Status RecordTrained(sqlite::Database& db, std::span<const TrainedSample> samples, int64_t version);

// Records at once, in one transaction, that the trainer acknowledged
// `sample_ids`: trained by the weights of `at_version` into the update it
// will publish as `into_version` (acked_at_version, acked_into_version). A
// sample already recorded trained, or not completed or failed, is left as
// it is. kInvalidArgument unless 0 <= at_version < into_version.
Status RecordAcked(sqlite::Database& db, std::span<const int64_t> sample_ids, int64_t at_version,
                   int64_t into_version);

// A sample acknowledged and not yet recorded trained.
struct AckedSample {
  int64_t sample_id = 0;
  int64_t at_version = 0;  // acked_at_version: the weights that computed its loss
};

// The samples of a job acknowledged into a version <= `version` and not yet
// recorded trained: those a durable checkpoint of `version` holds.
Result<std::vector<AckedSample>> AckedUpTo(sqlite::Database& db, int64_t job_id, int64_t version);

// Clears the acks of a job's samples acknowledged into a version above
// `durable_version` and not recorded trained (no durable checkpoint holds
// their update: they are served again). Returns their groups, ascending.
Result<std::vector<int64_t>> ForgetUndurableAcks(sqlite::Database& db, int64_t job_id, int64_t durable_version);

// A job's token totals over all its samples, across every run of the job:
// prefill_tokens and reprefill_tokens summed over every finished attempt
// (the engine computed them whatever became of the sample), trained_tokens
// the total_tokens of the samples a trainer step consumed (acknowledged or
// recorded trained).
struct JobTokenTotals {
  int64_t prefill_tokens = 0;
  int64_t reprefill_tokens = 0;
  int64_t trained_tokens = 0;
};
Result<JobTokenTotals> LoadJobTokenTotals(sqlite::Database& db, int64_t job_id);

struct PublishedVersion {
  int64_t version = 0;
  std::string path;
};

// The highest weight version recorded for a job, or nullopt for none.
Result<std::optional<PublishedVersion>> LatestWeightVersion(sqlite::Database& db, int64_t job_id);

// The path weights `version` of a job were published at, or nullopt when
// that version was never published.
Result<std::optional<std::string>> WeightVersionPath(sqlite::Database& db, int64_t job_id, int64_t version);

// Records that the trainer published weights `version` for a job at `path`.
// Returns OK; kAlreadyExists when the job already has that version;
// kInvalidArgument for an unknown job or a negative version.
Status RecordWeightVersion(sqlite::Database& db, int64_t job_id, int64_t version, std::string_view path);

struct SandboxEvent {
  std::string sandbox_id;
  std::optional<int64_t> sample_id;  // none for a sandbox not (yet) bound to a sample
  SandboxEventKind kind = SandboxEventKind::kCreated;
  std::string detail_json = "{}";
};

// Appends a sandbox event stamped now. Returns its id, or kInvalidArgument
// for an unknown sample or invalid JSON.
Result<int64_t> RecordSandboxEvent(sqlite::Database& db, const SandboxEvent& event);

}  // namespace flashroll::store
