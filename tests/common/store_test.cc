#include "common/store.h"

#include <fcntl.h>
#include <cmath>

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <vector>

namespace flashroll::store {
namespace {

using sqlite::Database;
using sqlite::Statement;

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "store_test.XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    path_ = dir_ + "/store.db";
    db_ = OpenOrDie();
    ASSERT_NE(db_, nullptr);
  }
  void TearDown() override {
    db_.reset();
    std::filesystem::remove_all(dir_);
  }

  std::unique_ptr<Database> OpenOrDie() {
    Result<std::unique_ptr<Database>> db = OpenStore(path_);
    EXPECT_TRUE(db.ok()) << db.status().ToString();
    return db.ok() ? std::move(db).value() : nullptr;
  }

  // A job with one task; returns the task id.
  int64_t MakeTask(std::string_view job_name = "job-a") {
    Result<int64_t> job = CreateJob(*db_, job_name, "model: tiny\n");
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    job_id_ = job.ok() ? *job : 0;
    Result<int64_t> task = InsertTask(*db_, {.job_id = job_id_,
                                             .family = "math",
                                             .source_key = "gsm8k/17",
                                             .problem_json = R"({"question":"1+1?"})",
                                             .verifier_json = R"({"answer":"2"})",
                                             .difficulty = 0.25});
    EXPECT_TRUE(task.ok()) << task.status().ToString();
    return task.ok() ? *task : 0;
  }

  int64_t MakeSample(int64_t task_id, int64_t group_id = 1) {
    Result<int64_t> sample =
        InsertSample(*db_, {.task_id = task_id, .group_id = group_id, .effort = 75, .scaffold = "plain", .slot = std::nullopt});
    EXPECT_TRUE(sample.ok()) << sample.status().ToString();
    return sample.ok() ? *sample : 0;
  }

  std::string dir_;
  std::string path_;
  std::unique_ptr<Database> db_;
  int64_t job_id_ = 0;
};

std::string QueryText(Database& db, const std::string& sql) {
  Result<Statement> stmt = db.Prepare(sql);
  if (!stmt.ok()) return "prepare failed: " + stmt.status().ToString();
  Result<bool> row = stmt->Step();
  if (!row.ok()) return "step failed: " + row.status().ToString();
  if (!*row) return "no row";
  return stmt->IsNull(0) ? "NULL" : stmt->ColumnText(0);
}

int64_t QueryInt(Database& db, const std::string& sql) { return std::stoll(QueryText(db, sql)); }

// Aggregates built field by field: GCC 12 warns (-Wmissing-field-initializers)
// about designated initializers that leave members to their defaults.
NewSample NewSampleOf(int64_t task_id, int effort) {
  NewSample sample;
  sample.task_id = task_id;
  sample.effort = effort;
  sample.scaffold = "x";
  return sample;
}

SampleOutcome Outcome(int64_t sample_id, SampleStatus status, std::optional<double> reward = std::nullopt,
                      std::string error = "") {
  SampleOutcome outcome;
  outcome.sample_id = sample_id;
  outcome.status = status;
  outcome.reward = reward;
  outcome.error = std::move(error);
  return outcome;
}

SandboxEvent Event(std::string sandbox_id, SandboxEventKind kind, std::optional<int64_t> sample_id = std::nullopt,
                   std::string detail_json = "{}") {
  SandboxEvent event;
  event.sandbox_id = std::move(sandbox_id);
  event.kind = kind;
  event.sample_id = sample_id;
  event.detail_json = std::move(detail_json);
  return event;
}

Turn MakeTurn(int64_t sample_id, int index, int tokens, int32_t version) {
  Turn turn;
  turn.sample_id = sample_id;
  turn.turn_index = index;
  turn.role = index % 2 == 0 ? TurnRole::kUser : TurnRole::kAssistant;
  for (int i = 0; i < tokens; ++i) turn.token_ids.push_back(index * 100000 + i);
  if (turn.role == TurnRole::kAssistant) turn.policy_versions.assign(turn.token_ids.size(), version);
  turn.text = "turn " + std::to_string(index);
  return turn;
}

TEST_F(StoreTest, OpenStoreCreatesSchemaOnceAndReopens) {
  EXPECT_EQ(*sqlite::SchemaVersion(*db_), kSchemaVersion);
  EXPECT_EQ(static_cast<int>(Migrations().size()), kSchemaVersion);
  EXPECT_EQ(QueryText(*db_, "SELECT group_concat(name) FROM (SELECT name FROM sqlite_schema"
                            " WHERE type = 'table' ORDER BY name)"),
            "jobs,samples,sandbox_events,tasks,turns,weight_versions");
  EXPECT_EQ(QueryText(*db_, "PRAGMA journal_mode"), "wal");
  const int64_t task = MakeTask();
  db_.reset();
  db_ = OpenOrDie();
  ASSERT_NE(db_, nullptr);
  EXPECT_EQ(QueryInt(*db_, "SELECT count(*) FROM tasks WHERE id = " + std::to_string(task)), 1);
}

TEST_F(StoreTest, OpenStoreRefusesANewerStore) {
  ASSERT_TRUE(db_->Exec("PRAGMA user_version = " + std::to_string(kSchemaVersion + 1)).ok());
  db_.reset();
  Result<std::unique_ptr<Database>> db = OpenStore(path_);
  ASSERT_FALSE(db.ok());
  EXPECT_EQ(db.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(db.status().message().find("newer than"), std::string::npos) << db.status().ToString();
}

TEST_F(StoreTest, LookupsUseIndexes) {
  // The queries the scheduler and trainer run must not scan whole tables.
  const std::vector<std::string> lookups = {
      "SELECT id FROM samples WHERE job_id = 1 AND status = 'queued'",
      "SELECT id FROM samples WHERE job_id = 1 AND group_id = 3",
      "SELECT id FROM samples WHERE task_id = 1",
      "SELECT * FROM turns WHERE sample_id = 1 ORDER BY turn_index",
      "SELECT id FROM tasks WHERE job_id = 1 AND family = 'math'",
      "SELECT path FROM weight_versions WHERE job_id = 1 AND version = 2",
      "SELECT * FROM sandbox_events WHERE sandbox_id = 'sb-1' ORDER BY at_ms",
      "SELECT * FROM sandbox_events WHERE sample_id = 5",
      "SELECT count(*) FROM sandbox_events WHERE kind = 'oom' AND at_ms > 0",
  };
  for (const std::string& sql : lookups) {
    Result<Statement> plan = db_->Prepare("EXPLAIN QUERY PLAN " + sql);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    std::string details;
    while (*plan->Step()) details += plan->ColumnText(3) + "; ";
    EXPECT_EQ(details.find("SCAN"), std::string::npos) << sql << " -> " << details;
    EXPECT_NE(details.find("USING"), std::string::npos) << sql << " -> " << details;
  }
}

TEST_F(StoreTest, JobsAndTasks) {
  const int64_t task = MakeTask("job-a");
  EXPECT_EQ(QueryText(*db_, "SELECT status FROM jobs WHERE id = " + std::to_string(job_id_)), "running");
  EXPECT_EQ(QueryText(*db_, "SELECT config_yaml FROM jobs WHERE name = 'job-a'"), "model: tiny\n");

  Result<int64_t> again = CreateJob(*db_, "job-a", "");
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), Code::kAlreadyExists) << again.status().ToString();
  EXPECT_NE(again.status().message().find("job-a"), std::string::npos) << again.status().ToString();

  ASSERT_TRUE(SetJobStatus(*db_, job_id_, JobStatus::kCompleted).ok());
  EXPECT_EQ(QueryText(*db_, "SELECT status FROM jobs WHERE id = " + std::to_string(job_id_)), "completed");
  EXPECT_EQ(SetJobStatus(*db_, 999, JobStatus::kFailed).code(), Code::kNotFound);

  EXPECT_EQ(QueryText(*db_, "SELECT difficulty FROM tasks WHERE id = " + std::to_string(task)), "0.25");
  NewTask dup;
  dup.job_id = job_id_;
  dup.family = "math";
  dup.source_key = "gsm8k/17";
  dup.problem_json = "{}";
  dup.verifier_json = "{}";
  EXPECT_EQ(InsertTask(*db_, dup).status().code(), Code::kAlreadyExists);
  NewTask no_difficulty = dup;
  no_difficulty.source_key = "gsm8k/18";
  Result<int64_t> second = InsertTask(*db_, no_difficulty);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(QueryText(*db_, "SELECT difficulty FROM tasks WHERE id = " + std::to_string(*second)), "NULL");
  NewTask bad_json = dup;
  bad_json.source_key = "gsm8k/19";
  bad_json.problem_json = "{not json";
  Result<int64_t> bad = InsertTask(*db_, bad_json);
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("CHECK constraint failed"), std::string::npos) << bad.status().ToString();
  NewTask orphan = dup;
  orphan.job_id = 999;
  Result<int64_t> orphaned = InsertTask(*db_, orphan);
  EXPECT_EQ(orphaned.status().code(), Code::kInvalidArgument);
  EXPECT_NE(orphaned.status().message().find("FOREIGN KEY"), std::string::npos) << orphaned.status().ToString();
}

TEST_F(StoreTest, SampleLifecycle) {
  const int64_t task = MakeTask();
  const int64_t sample = MakeSample(task, 7);
  const std::string where = " FROM samples WHERE id = " + std::to_string(sample);
  EXPECT_EQ(QueryText(*db_, "SELECT status" + where), "queued");
  EXPECT_EQ(QueryInt(*db_, "SELECT job_id" + where), job_id_);  // taken from the task
  EXPECT_EQ(QueryInt(*db_, "SELECT group_id" + where), 7);
  EXPECT_EQ(QueryInt(*db_, "SELECT effort" + where), 75);

  EXPECT_EQ(InsertSample(*db_, NewSampleOf(999, 50)).status().code(), Code::kNotFound);
  EXPECT_EQ(InsertSample(*db_, NewSampleOf(task, 0)).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(InsertSample(*db_, NewSampleOf(task, 101)).status().code(),
            Code::kInvalidArgument);

  ASSERT_TRUE(StartSample(*db_, sample).ok());
  EXPECT_EQ(QueryText(*db_, "SELECT status" + where), "running");
  EXPECT_NE(QueryText(*db_, "SELECT started_at_ms" + where), "NULL");
  Status twice = StartSample(*db_, sample);
  EXPECT_EQ(twice.code(), Code::kFailedPrecondition);
  EXPECT_NE(twice.message().find("running, not queued"), std::string::npos) << twice.ToString();
  EXPECT_EQ(StartSample(*db_, 999).code(), Code::kNotFound);

  // One turn streamed early, the rest with the outcome.
  ASSERT_TRUE(AppendTurn(*db_, MakeTurn(sample, 0, 5, 0)).ok());
  const std::vector<Turn> rest = {MakeTurn(sample, 1, 8, 3), MakeTurn(sample, 2, 4, 0), MakeTurn(sample, 3, 6, 4)};
  SampleOutcome outcome = Outcome(sample, SampleStatus::kCompleted, 0.75);
  outcome.first_policy_version = 3;
  outcome.last_policy_version = 4;
  outcome.reasoning_tokens = 14;
  outcome.total_tokens = 23;
  outcome.generate_ms = 120;
  outcome.tool_ms = 30;
  outcome.verify_ms = 5;
  ASSERT_TRUE(CompleteSample(*db_, outcome, rest).ok());
  EXPECT_EQ(QueryText(*db_, "SELECT status || ' ' || reward || ' ' || first_policy_version || ' ' ||"
                            " last_policy_version || ' ' || reasoning_tokens || ' ' || total_tokens || ' ' ||"
                            " generate_ms || ' ' || tool_ms || ' ' || verify_ms || ' ' || (error IS NULL)" +
                                where),
            "completed 0.75 3 4 14 23 120 30 5 1");
  EXPECT_NE(QueryText(*db_, "SELECT finished_at_ms" + where), "NULL");
  Status again = CompleteSample(*db_, outcome, {});
  EXPECT_EQ(again.code(), Code::kFailedPrecondition);
  EXPECT_NE(again.message().find("already completed"), std::string::npos) << again.ToString();

  Result<std::vector<Turn>> turns = LoadTurns(*db_, sample);
  ASSERT_TRUE(turns.ok()) << turns.status().ToString();
  ASSERT_EQ(turns->size(), 4u);
  for (int i = 0; i < 4; ++i) {
    const Turn expected = i == 0 ? MakeTurn(sample, 0, 5, 0) : rest[i - 1];
    const Turn& got = (*turns)[i];
    EXPECT_EQ(got.turn_index, i);
    EXPECT_EQ(got.role, expected.role);
    EXPECT_EQ(got.token_ids, expected.token_ids);
    EXPECT_EQ(got.policy_versions, expected.policy_versions);
    EXPECT_EQ(got.text, expected.text);
  }
}

TEST_F(StoreTest, TurnBlobsAreInt32LittleEndian) {
  const int64_t sample = MakeSample(MakeTask());
  Turn turn;
  turn.sample_id = sample;
  turn.turn_index = 0;
  turn.role = TurnRole::kAssistant;
  turn.token_ids = {0x01020304, -2, 0, 2147483647};
  turn.policy_versions = {7, 7, 8, 8};
  turn.text = "x";
  turn.tool_call_json = R"({"name":"bash","arguments":{"cmd":"ls"}})";
  turn.tool_result_json = R"({"exit_code":0})";
  ASSERT_TRUE(AppendTurn(*db_, turn).ok());
  const std::string where = " FROM turns WHERE sample_id = " + std::to_string(sample);
  EXPECT_EQ(QueryText(*db_, "SELECT hex(token_ids)" + where), "04030201FEFFFFFF00000000FFFFFF7F");
  EXPECT_EQ(QueryText(*db_, "SELECT hex(policy_versions)" + where), "07000000070000000800000008000000");
  EXPECT_EQ(QueryText(*db_, "SELECT role" + where), "assistant");

  Result<std::vector<Turn>> loaded = LoadTurns(*db_, sample);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_EQ(loaded->size(), 1u);
  EXPECT_EQ((*loaded)[0].token_ids, turn.token_ids);
  EXPECT_EQ((*loaded)[0].tool_call_json, turn.tool_call_json);
  EXPECT_EQ((*loaded)[0].tool_result_json, turn.tool_result_json);

  // A prompt turn: no policy versions (NULL), and an empty turn keeps a
  // zero-length token blob.
  Turn prompt = MakeTurn(sample, 1, 3, 0);
  prompt.role = TurnRole::kTool;
  prompt.policy_versions.clear();
  ASSERT_TRUE(AppendTurn(*db_, prompt).ok());
  Turn empty = MakeTurn(sample, 2, 0, 0);
  ASSERT_TRUE(AppendTurn(*db_, empty).ok());
  EXPECT_EQ(QueryText(*db_, "SELECT policy_versions IS NULL" + where + " AND turn_index = 1"), "1");
  EXPECT_EQ(QueryText(*db_, "SELECT typeof(token_ids) || length(token_ids)" + where + " AND turn_index = 2"),
            "blob0");
  loaded = LoadTurns(*db_, sample);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_EQ(loaded->size(), 3u);
  EXPECT_TRUE((*loaded)[1].policy_versions.empty());
  EXPECT_FALSE((*loaded)[1].tool_call_json.has_value());
  EXPECT_TRUE((*loaded)[2].token_ids.empty());
}

TEST_F(StoreTest, LogprobsAndLossMaskRoundTripAsLittleEndianBlobs) {
  const int64_t sample = MakeSample(MakeTask());
  Turn turn = MakeTurn(sample, 1, 3, 4);
  turn.logprobs = {-0.5f, -1.25f, -0.0f};
  turn.loss_mask = {1, 0, 1};
  ASSERT_TRUE(AppendTurn(*db_, turn).ok());
  const std::string where = " FROM turns WHERE sample_id = " + std::to_string(sample);
  // -0.5f is 0xBF000000, -1.25f 0xBFA00000, -0.0f 0x80000000.
  EXPECT_EQ(QueryText(*db_, "SELECT hex(logprobs)" + where), "000000BF0000A0BF00000080");
  EXPECT_EQ(QueryText(*db_, "SELECT hex(loss_mask)" + where), "010001");
  Result<std::vector<Turn>> loaded = LoadTurns(*db_, sample);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ((*loaded)[0].logprobs, turn.logprobs);
  EXPECT_TRUE(std::signbit((*loaded)[0].logprobs[2]));
  EXPECT_EQ((*loaded)[0].loss_mask, turn.loss_mask);

  Turn plain = MakeTurn(sample, 2, 2, 0);
  ASSERT_TRUE(AppendTurn(*db_, plain).ok());
  EXPECT_EQ(QueryText(*db_, "SELECT logprobs IS NULL AND loss_mask IS NULL" + where + " AND turn_index = 2"), "1");

  Turn short_logprobs = MakeTurn(sample, 3, 3, 1);
  short_logprobs.logprobs = {-1.0f};
  Status s1 = AppendTurn(*db_, short_logprobs);
  EXPECT_EQ(s1.code(), Code::kInvalidArgument);
  EXPECT_NE(s1.message().find("1 logprobs for 3 tokens"), std::string::npos) << s1.ToString();
  Turn short_mask = MakeTurn(sample, 3, 3, 1);
  short_mask.loss_mask = {1, 1};
  Status s2 = AppendTurn(*db_, short_mask);
  EXPECT_EQ(s2.code(), Code::kInvalidArgument);
  EXPECT_NE(s2.message().find("2 loss-mask entries for 3 tokens"), std::string::npos) << s2.ToString();
  // The schema refuses a mismatched blob written past the helpers, too.
  EXPECT_FALSE(db_->Exec("UPDATE turns SET loss_mask = x'01' WHERE sample_id = " + std::to_string(sample) +
                         " AND turn_index = 1").ok());
}

TEST_F(StoreTest, RewardPartsAreStoredAsJson) {
  const int64_t task = MakeTask();
  const auto TaskOf = [task](int64_t) { return task; };
  const int64_t sample = MakeSample(task);
  SampleOutcome outcome;
  outcome.sample_id = sample;
  outcome.reward = 0.75;
  outcome.reward_parts_json = R"({"verifier":1,"length":-0.25})";
  ASSERT_TRUE(CompleteSample(*db_, outcome, {}).ok());
  EXPECT_EQ(QueryText(*db_, "SELECT json_extract(reward_parts_json, '$.length') FROM samples WHERE id = " +
                                std::to_string(sample)),
            "-0.25");
  const int64_t other = MakeSample(TaskOf(sample), 2);
  outcome.sample_id = other;
  outcome.reward_parts_json = "{";
  EXPECT_FALSE(CompleteSample(*db_, outcome, {}).ok());
}

TEST_F(StoreTest, AppendTurnRejectsBadTurns) {
  const int64_t sample = MakeSample(MakeTask());
  ASSERT_TRUE(AppendTurn(*db_, MakeTurn(sample, 0, 3, 1)).ok());
  Status dup = AppendTurn(*db_, MakeTurn(sample, 0, 3, 1));
  EXPECT_EQ(dup.code(), Code::kAlreadyExists) << dup.ToString();
  EXPECT_NE(dup.message().find("append turn 0 of sample"), std::string::npos) << dup.ToString();

  Turn short_versions = MakeTurn(sample, 1, 3, 1);
  short_versions.policy_versions = {1};
  Status mismatch = AppendTurn(*db_, short_versions);
  EXPECT_EQ(mismatch.code(), Code::kInvalidArgument);
  EXPECT_NE(mismatch.message().find("1 policy versions for 3 tokens"), std::string::npos) << mismatch.ToString();

  EXPECT_EQ(AppendTurn(*db_, MakeTurn(999, 0, 3, 1)).code(), Code::kInvalidArgument);  // no such sample
  Turn bad_json = MakeTurn(sample, 2, 1, 1);
  bad_json.tool_call_json = "{";
  EXPECT_EQ(AppendTurn(*db_, bad_json).code(), Code::kInvalidArgument);
}

TEST_F(StoreTest, CompleteSampleWritesNothingWhenATurnFails) {
  const int64_t sample = MakeSample(MakeTask());
  ASSERT_TRUE(StartSample(*db_, sample).ok());
  std::vector<Turn> turns = {MakeTurn(sample, 0, 3, 1), MakeTurn(sample, 1, 3, 1), MakeTurn(sample, 2, 3, 1)};
  turns[2].policy_versions = {1};  // one version for three tokens
  Status status = CompleteSample(*db_, Outcome(sample, SampleStatus::kCompleted), turns);
  EXPECT_EQ(status.code(), Code::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find("complete sample"), std::string::npos) << status.ToString();
  EXPECT_FALSE(db_->InTransaction());
  EXPECT_EQ(QueryInt(*db_, "SELECT count(*) FROM turns"), 0);
  EXPECT_EQ(QueryText(*db_, "SELECT status FROM samples WHERE id = " + std::to_string(sample)), "running");

  EXPECT_EQ(CompleteSample(*db_, Outcome(sample, SampleStatus::kRunning), {}).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(CompleteSample(*db_, Outcome(999, SampleStatus::kFailed), {}).code(), Code::kNotFound);

  // A failure outcome: no reward, and the reason recorded.
  ASSERT_TRUE(CompleteSample(*db_,
                             Outcome(sample, SampleStatus::kFailed, std::nullopt, "sandbox oom"),
                             std::span<const Turn>(turns.data(), 2))
                  .ok());
  EXPECT_EQ(QueryText(*db_, "SELECT status || ' ' || error || ' ' || (reward IS NULL) FROM samples"),
            "failed sandbox oom 1");
  EXPECT_EQ(QueryInt(*db_, "SELECT count(*) FROM turns"), 2);
}

TEST_F(StoreTest, AdvantagesOnlyForCompletedSamples) {
  const int64_t task = MakeTask();
  const int64_t a = MakeSample(task, 1);
  const int64_t b = MakeSample(task, 1);
  const int64_t queued = MakeSample(task, 1);
  for (int64_t s : {a, b}) {
    ASSERT_TRUE(CompleteSample(*db_, Outcome(s, SampleStatus::kCompleted, 1.0), {}).ok());
  }
  const std::vector<SampleAdvantage> bad = {{a, 0.5}, {queued, -0.5}};
  Status status = RecordAdvantages(*db_, bad);
  EXPECT_EQ(status.code(), Code::kFailedPrecondition) << status.ToString();
  EXPECT_NE(status.message().find("sample " + std::to_string(queued)), std::string::npos) << status.ToString();
  EXPECT_EQ(QueryInt(*db_, "SELECT count(*) FROM samples WHERE advantage IS NOT NULL"), 0);

  const std::vector<SampleAdvantage> good = {{a, 0.5}, {b, -0.5}};
  ASSERT_TRUE(RecordAdvantages(*db_, good).ok());
  EXPECT_EQ(QueryText(*db_, "SELECT group_concat(advantage) FROM (SELECT advantage FROM samples"
                            " WHERE advantage IS NOT NULL ORDER BY id)"),
            "0.5,-0.5");
}

TEST_F(StoreTest, WeightVersionsAndSandboxEvents) {
  const int64_t sample = MakeSample(MakeTask());
  ASSERT_TRUE(RecordWeightVersion(*db_, job_id_, 0, "/ckpt/v0").ok());
  ASSERT_TRUE(RecordWeightVersion(*db_, job_id_, 1, "/ckpt/v1").ok());
  EXPECT_EQ(RecordWeightVersion(*db_, job_id_, 1, "/ckpt/v1b").code(), Code::kAlreadyExists);
  EXPECT_EQ(RecordWeightVersion(*db_, 999, 1, "/x").code(), Code::kInvalidArgument);
  EXPECT_EQ(RecordWeightVersion(*db_, job_id_, -1, "/x").code(), Code::kInvalidArgument);
  EXPECT_EQ(QueryText(*db_, "SELECT path FROM weight_versions WHERE job_id = " + std::to_string(job_id_) +
                                " AND version = 1"),
            "/ckpt/v1");

  Result<int64_t> created = RecordSandboxEvent(*db_, Event("sb-1", SandboxEventKind::kCreated));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  Result<int64_t> oom = RecordSandboxEvent(*db_, Event("sb-1", SandboxEventKind::kOom, sample,
                                                        R"({"limit_bytes":1073741824})"));
  ASSERT_TRUE(oom.ok()) << oom.status().ToString();
  EXPECT_GT(*oom, *created);
  EXPECT_EQ(QueryText(*db_, "SELECT group_concat(kind || ':' || ifnull(sample_id, '-'), ' ') FROM"
                            " (SELECT * FROM sandbox_events ORDER BY id)"),
            "created:- oom:" + std::to_string(sample));
  EXPECT_EQ(QueryText(*db_, "SELECT detail_json ->> '$.limit_bytes' FROM sandbox_events WHERE kind = 'oom'"),
            "1073741824");
  EXPECT_EQ(RecordSandboxEvent(*db_, Event("sb-2", SandboxEventKind::kCreated, 999)).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(RecordSandboxEvent(*db_, Event("sb-2", SandboxEventKind::kCreated, std::nullopt, "oops")).status().code(),
            Code::kInvalidArgument);
}

// Schema 5: a failed sample records its infrastructure failure's kind (none
// for the agent's own outcomes), and a store of schema 4 keeps its rows, the
// sandbox's init exit renamed to the manager's name for it.
// Schema 6: what the engine computed per sample; the job's totals sum it
// over every attempt, and the tokens of the samples a trainer consumed.
TEST_F(StoreTest, JobTokenTotalsSumPrefillOverAttemptsAndTrainedTokensOverConsumedSamples) {
  const int64_t task = MakeTask();
  const int64_t trained = MakeSample(task), acked = MakeSample(task), failed = MakeSample(task), left = MakeSample(task);
  const int64_t tokens[] = {100, 70, 40, 30};
  const int64_t ids[] = {trained, acked, failed, left};
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(StartSample(*db_, ids[i]).ok());
    SampleOutcome outcome = Outcome(ids[i], i == 2 ? SampleStatus::kFailed : SampleStatus::kCompleted, 1.0);
    outcome.total_tokens = tokens[i];
    outcome.prefill_tokens = tokens[i] / 2;
    outcome.reprefill_tokens = i;
    ASSERT_TRUE(CompleteSample(*db_, outcome, {}).ok());
  }
  ASSERT_TRUE(RecordAcked(*db_, std::vector<int64_t>{trained, acked}, 0, 1).ok());
  const TrainedSample done{.sample_id = trained, .loss_masks = {}};
  ASSERT_TRUE(RecordTrained(*db_, std::span<const TrainedSample>(&done, 1), 1).ok());
  auto totals = LoadJobTokenTotals(*db_, job_id_);
  ASSERT_TRUE(totals.ok()) << totals.status().ToString();
  EXPECT_EQ(totals->prefill_tokens, 50 + 35 + 20 + 15);
  EXPECT_EQ(totals->reprefill_tokens, 0 + 1 + 2 + 3);
  EXPECT_EQ(totals->trained_tokens, 100 + 70);
  // A recompute never exceeds what was computed.
  SampleOutcome bad = Outcome(MakeSample(task), SampleStatus::kCompleted, 1.0);
  ASSERT_TRUE(StartSample(*db_, bad.sample_id).ok());
  bad.prefill_tokens = 5;
  bad.reprefill_tokens = 6;
  EXPECT_FALSE(CompleteSample(*db_, bad, {}).ok());
}

TEST_F(StoreTest, SchemaFiveRecordsFailureKindsAndNamesEventsAsTheSandboxDoes) {
  const int64_t task = MakeTask();
  const int64_t infra = MakeSample(task), agent = MakeSample(task);
  ASSERT_TRUE(StartSample(*db_, infra).ok());
  ASSERT_TRUE(StartSample(*db_, agent).ok());
  SampleOutcome lost = Outcome(infra, SampleStatus::kFailed, std::nullopt, "sandbox gone");
  lost.failure_kind = "sandbox_lost";
  ASSERT_TRUE(CompleteSample(*db_, lost, {}).ok());
  ASSERT_TRUE(CompleteSample(*db_, Outcome(agent, SampleStatus::kCompleted, 0.0), {}).ok());
  EXPECT_EQ(QueryText(*db_, "SELECT group_concat(ifnull(failure_kind, '-'), ' ') FROM (SELECT * FROM samples ORDER BY id)"),
            "sandbox_lost -");
  ASSERT_TRUE(RecordSandboxEvent(*db_, Event("sb-1", SandboxEventKind::kInitExit, infra)).ok());
  EXPECT_EQ(QueryText(*db_, "SELECT kind FROM sandbox_events"), "init_exit");
  EXPECT_EQ(ParseSandboxEventKind("teardown_failed"), SandboxEventKind::kTeardownFailed);
  EXPECT_EQ(ParseSandboxEventKind("pid1_exit"), std::nullopt);

  // A store of schema 4 with an event under the old name.
  db_.reset();
  std::filesystem::remove_all(dir_);
  ASSERT_TRUE(std::filesystem::create_directories(dir_));
  {
    auto old = Database::Open(path_, {});
    ASSERT_TRUE(old.ok()) << old.status().ToString();
    ASSERT_TRUE(sqlite::Migrate(**old, std::vector<sqlite::Migration>(Migrations().begin(), Migrations().begin() + 4)).ok());
    ASSERT_TRUE((*old)->Exec("INSERT INTO sandbox_events (sandbox_id, kind, detail_json, at_ms)"
                             " VALUES ('sb-old', 'pid1_exit', '{}', 1)").ok());
  }
  db_ = OpenOrDie();
  ASSERT_NE(db_, nullptr);
  EXPECT_EQ(*sqlite::SchemaVersion(*db_), kSchemaVersion);
  EXPECT_EQ(QueryText(*db_, "SELECT kind FROM sandbox_events WHERE sandbox_id = 'sb-old'"), "init_exit");
  EXPECT_EQ(QueryInt(*db_, "SELECT count(*) FROM pragma_table_info('samples') WHERE name = 'failure_kind'"), 1);
}

// ---- A writer killed mid-transaction ----

constexpr int kTurnsBeforeSignal = 1000;
constexpr int kTokensPerTurn = 1024;

bool WriteAll(int fd, const void* data, size_t size) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool ReadAll(int fd, void* data, size_t size) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = read(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// The child's side: opens its own connection, commits one sample, then
// opens a transaction, writes a sample and kTurnsBeforeSignal big turns,
// reports both sample ids on `fd` and keeps writing until it is killed.
// Returns an exit code (non-zero says which step failed); never returns
// normally when all goes well.
int DoomedWriter(const std::string& path, int64_t task_id, int fd) {
  alarm(120);  // an orphan if the parent died; SIGALRM ends it
  Result<std::unique_ptr<Database>> db = OpenStore(path);
  if (!db.ok()) return 10;
  Result<int64_t> committed = InsertSample(**db, {.task_id = task_id, .group_id = 2, .effort = 50, .scaffold = "c", .slot = std::nullopt});
  if (!committed.ok()) return 11;
  std::vector<Turn> turns;
  for (int i = 0; i < 5; ++i) turns.push_back(MakeTurn(*committed, i, 16, 2));
  if (!CompleteSample(**db, Outcome(*committed, SampleStatus::kCompleted), turns).ok()) return 12;

  Result<sqlite::Transaction> txn = sqlite::Transaction::Begin(**db);
  if (!txn.ok()) return 13;
  Result<int64_t> doomed = InsertSample(**db, {.task_id = task_id, .group_id = 3, .effort = 50, .scaffold = "d", .slot = std::nullopt});
  if (!doomed.ok()) return 14;
  int index = 0;
  for (; index < kTurnsBeforeSignal; ++index) {
    if (!AppendTurn(**db, MakeTurn(*doomed, index, kTokensPerTurn, 3)).ok()) return 15;
  }
  const int64_t ids[2] = {*committed, *doomed};
  if (!WriteAll(fd, ids, sizeof(ids))) return 16;
  for (;; ++index) {
    if (!AppendTurn(**db, MakeTurn(*doomed, index, kTokensPerTurn, 3)).ok()) return 17;
  }
}

TEST_F(StoreTest, SigkillMidTransactionKeepsOnlyCommittedRows) {
  // Committed by the parent before the child starts.
  const int64_t task = MakeTask();
  const int64_t parent_sample = MakeSample(task);
  std::vector<Turn> parent_turns;
  for (int i = 0; i < 10; ++i) parent_turns.push_back(MakeTurn(parent_sample, i, 32, 1));
  ASSERT_TRUE(CompleteSample(*db_, Outcome(parent_sample, SampleStatus::kCompleted, 1.0),
                             parent_turns)
                  .ok());
  // No connection crosses fork(): SQLite's per-process lock bookkeeping
  // would be shared with the child.
  db_.reset();

  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    _exit(DoomedWriter(path_, task, fds[1]));
  }
  close(fds[1]);
  int64_t ids[2] = {0, 0};
  const bool signalled = ReadAll(fds[0], ids, sizeof(ids));
  close(fds[0]);
  if (!signalled) {
    int status = 0;
    waitpid(pid, &status, 0);
    FAIL() << "child failed before its transaction was under way; wait status " << status << ", exit code "
           << (WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  }
  const int64_t committed_sample = ids[0];
  const int64_t doomed_sample = ids[1];
  const std::string doomed = std::to_string(doomed_sample);

  // Mid-transaction, another connection sees the committed rows and none of
  // the open transaction's.
  {
    auto reader = OpenOrDie();
    ASSERT_NE(reader, nullptr);
    EXPECT_EQ(QueryInt(*reader, "SELECT count(*) FROM samples WHERE id = " + doomed), 0);
    EXPECT_EQ(QueryInt(*reader, "SELECT count(*) FROM turns WHERE sample_id = " + doomed), 0);
    EXPECT_EQ(QueryInt(*reader, "SELECT count(*) FROM samples"), 2);
  }

  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "child was not killed mid-transaction; wait status " << status;
  // The transaction outgrew SQLite's page cache (~2 MiB), so its uncommitted
  // pages were already spilled into the WAL file: recovery has to skip
  // frames on disk, not merely lose an unwritten cache.
  const auto wal_size = std::filesystem::file_size(path_ + "-wal");
  EXPECT_GT(wal_size, 2u << 20) << "WAL bytes at the kill";

  db_ = OpenOrDie();
  ASSERT_NE(db_, nullptr);
  EXPECT_EQ(QueryText(*db_, "PRAGMA integrity_check"), "ok");
  EXPECT_EQ(QueryText(*db_, "PRAGMA foreign_key_check"), "no row");

  // Nothing of the killed transaction...
  EXPECT_EQ(QueryInt(*db_, "SELECT count(*) FROM samples WHERE id = " + doomed), 0);
  EXPECT_EQ(QueryInt(*db_, "SELECT count(*) FROM turns WHERE sample_id = " + doomed), 0);
  EXPECT_EQ(QueryInt(*db_, "SELECT count(*) FROM samples WHERE group_id = 3"), 0);
  // ...and everything committed before it, by either process.
  EXPECT_EQ(QueryInt(*db_, "SELECT count(*) FROM samples"), 2);
  EXPECT_EQ(QueryText(*db_, "SELECT status FROM samples WHERE id = " + std::to_string(parent_sample)), "completed");
  EXPECT_EQ(QueryText(*db_, "SELECT status FROM samples WHERE id = " + std::to_string(committed_sample)),
            "completed");
  Result<std::vector<Turn>> parent_loaded = LoadTurns(*db_, parent_sample);
  ASSERT_TRUE(parent_loaded.ok()) << parent_loaded.status().ToString();
  ASSERT_EQ(parent_loaded->size(), 10u);
  EXPECT_EQ((*parent_loaded)[9].token_ids, parent_turns[9].token_ids);
  EXPECT_EQ(QueryInt(*db_, "SELECT count(*) FROM turns WHERE sample_id = " + std::to_string(committed_sample)), 5);
  EXPECT_EQ(QueryInt(*db_, "SELECT count(*) FROM turns"), 15);

  // The store is writable again: the killed writer's lock died with it.
  const int64_t after = MakeSample(task, 4);
  EXPECT_GT(after, 0);
}

// A slot keeps one finished attempt; an unfinished one is superseded, and
// what was trained is recorded once with the mask it trained with.
TEST_F(StoreTest, ASlotKeepsOneFinishedAttemptAndTrainedIsRecordedOnce) {
  const int64_t task = MakeTask();
  NewSample row = NewSampleOf(task, 75);
  row.group_id = 1;
  row.slot = 0;
  const int64_t first = *InsertSample(*db_, row);
  const int64_t retry = *InsertSample(*db_, row);
  ASSERT_TRUE(StartSample(*db_, first).ok());
  Turn turn = MakeTurn(first, 1, 4, 0);
  turn.loss_mask.assign(4, 1);
  ASSERT_TRUE(CompleteSample(*db_, Outcome(first, SampleStatus::kCompleted, 1.0), std::vector<Turn>{turn}).ok());
  ASSERT_TRUE(StartSample(*db_, retry).ok());
  EXPECT_FALSE(CompleteSample(*db_, Outcome(retry, SampleStatus::kCompleted, 0.0), {}).ok())
      << "a second finished attempt of slot 0";
  ASSERT_TRUE(SupersedeUnfinished(*db_, job_id_).ok());
  EXPECT_EQ(QueryText(*db_, "SELECT status FROM samples WHERE id = " + std::to_string(retry)), "superseded");
  EXPECT_EQ(QueryText(*db_, "SELECT status FROM samples WHERE id = " + std::to_string(first)), "completed");

  TrainedSample trained{first, {{1, {1, 0, 1, 0}}}};
  ASSERT_TRUE(RecordTrained(*db_, std::vector<TrainedSample>{trained}, 3).ok());
  TrainedSample again{first, {{1, {0, 0, 0, 0}}}};
  ASSERT_TRUE(RecordTrained(*db_, std::vector<TrainedSample>{again}, 5).ok()) << "a retried ack";
  EXPECT_EQ(QueryText(*db_, "SELECT trained_at_version FROM samples WHERE id = " + std::to_string(first)), "3");
  EXPECT_EQ(QueryText(*db_, "SELECT hex(loss_mask) FROM turns WHERE turn_index = 1"), "01000100");
  ASSERT_TRUE(db_->Exec("UPDATE samples SET trained_at_version = NULL").ok());
  TrainedSample wrong{first, {{1, {1, 1}}}};
  EXPECT_EQ(RecordTrained(*db_, std::vector<TrainedSample>{wrong}, 4).code(), Code::kInvalidArgument);
  EXPECT_EQ(QueryText(*db_, "SELECT trained_at_version FROM samples WHERE id = " + std::to_string(first)), "NULL")
      << "nothing written";
}

// Version 4: an ack is recorded at once, made trained only by a durable
// version at or above the one it goes into, and cleared when no durable
// checkpoint holds it (its groups are served again).
TEST_F(StoreTest, AnAckIsRecordedAtOnceAndForgottenUnlessAVersionHoldingItIsDurable) {
  const int64_t task = MakeTask();
  std::vector<int64_t> ids;
  for (int group = 1; group <= 3; ++group) {
    NewSample row = NewSampleOf(task, 75);
    row.group_id = group;
    row.slot = 0;
    const int64_t id = *InsertSample(*db_, row);
    ASSERT_TRUE(StartSample(*db_, id).ok());
    ASSERT_TRUE(CompleteSample(*db_, Outcome(id, SampleStatus::kCompleted, 1.0), {}).ok());
    ids.push_back(id);
  }
  EXPECT_EQ(RecordAcked(*db_, std::vector<int64_t>{ids[0]}, 2, 2).code(), Code::kInvalidArgument)
      << "an update goes into a later version";
  ASSERT_TRUE(RecordAcked(*db_, std::vector<int64_t>{ids[0]}, 0, 1).ok());
  ASSERT_TRUE(RecordAcked(*db_, std::vector<int64_t>{ids[1], ids[2]}, 1, 3).ok());
  EXPECT_EQ(QueryText(*db_, "SELECT group_concat(acked_into_version) FROM samples"), "1,3,3");
  auto up_to_2 = AckedUpTo(*db_, job_id_, 2);
  ASSERT_TRUE(up_to_2.ok());
  ASSERT_EQ(up_to_2->size(), 1u);
  EXPECT_EQ((*up_to_2)[0].sample_id, ids[0]);
  EXPECT_EQ((*up_to_2)[0].at_version, 0);
  ASSERT_TRUE(RecordTrained(*db_, std::vector<TrainedSample>{{ids[0], {}}}, 0).ok());
  EXPECT_TRUE(AckedUpTo(*db_, job_id_, 5)->size() == 2u) << "a trained sample is acked no more";
  auto forgotten = ForgetUndurableAcks(*db_, job_id_, 2);
  ASSERT_TRUE(forgotten.ok()) << forgotten.status().ToString();
  EXPECT_EQ(*forgotten, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(QueryText(*db_, "SELECT group_concat(coalesce(acked_into_version, 'x')) FROM samples"), "1,x,x");
  EXPECT_TRUE(ForgetUndurableAcks(*db_, job_id_, 0)->empty()) << "a trained sample's ack stays";
  EXPECT_FALSE(LatestWeightVersion(*db_, job_id_)->has_value());
  ASSERT_TRUE(RecordWeightVersion(*db_, job_id_, 4, "v000004").ok());
  ASSERT_TRUE(RecordWeightVersion(*db_, job_id_, 2, "v000002").ok());
  auto latest = LatestWeightVersion(*db_, job_id_);
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ((*latest)->version, 4);
  EXPECT_EQ((*latest)->path, "v000004");
}

}  // namespace
}  // namespace flashroll::store
