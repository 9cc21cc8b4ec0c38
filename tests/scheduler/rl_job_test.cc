// The RL job end to end on the shipped default model, real sandboxes and a
// real SQLite store: every task x effort x G sample is stored with its
// trajectory, rewards follow the length formula, advantages are
// group-relative, and a job killed with SIGKILL resumes without losing or
// repeating a finished sample.
#include "scheduler/rl_job.h"

#include <signal.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/store.h"
#include "engine/models/model.h"
#include "engine/models/model_tokenizer.h"
#include "engine/server/openai_server.h"
#include "rewards/length_reward.h"
#include "scheduler/export.h"
#include "scheduler/job_config.h"
#include "tests/scheduler/job_process_util.h"
#include "scheduler/trajectory.h"

namespace flashroll {
namespace {

class RlJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/rl_job_test.XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string WriteConfig(const std::string& name, int tasks, const std::string& extra = "") {
    const std::string path = dir_ + "/" + name + ".yaml";
    std::ofstream(path) << "kind: rl_job\nname: " << name << "\nstore: " << dir_ << "/store.db\n"
                        << "model: {path: models/default, threads: 2}\n"
                        << "tasks: {families: [arithmetic, file_sum], count: " << tasks << ", seed: 5}\n"
                        << "rollout: {max_turns: 4, max_tokens: 1024, efforts: [1, 100]}\n"
                        << "scheduler: {group_size: 2, max_in_flight: 4, max_per_task: 4}\n"
                        << "rewards: {k0: 0.2, c_max: 0.5, l_norm: 1024, lambda: 0.5}\n"
                        << "training: none\n"
                        << extra;
    return path;
  }

  JobConfig Load(const std::string& path) {
    auto file = LoadYamlFile(path);
    EXPECT_TRUE(file.ok()) << file.status().ToString();
    auto config = ParseJobConfig(*file);
    EXPECT_TRUE(config.ok()) << config.status().ToString();
    return *config;
  }

  std::unique_ptr<sqlite::Database> Store() {
    auto db = store::OpenStore(dir_ + "/store.db");
    EXPECT_TRUE(db.ok());
    return std::move(*db);
  }

  static int64_t Count(sqlite::Database& db, const std::string& sql) {
    auto stmt = db.Prepare(sql);
    EXPECT_TRUE(stmt.ok()) << stmt.status().ToString();
    EXPECT_TRUE(*stmt->Step());
    return stmt->ColumnInt64(0);
  }

  std::string dir_;
};

TEST_F(RlJobTest, EverySampleIsStoredWithItsTrajectoryRewardAndAdvantage) {
  const JobConfig config = Load(WriteConfig("full", 2));
  RlJobOptions options;
  int64_t started = 0;
  options.on_started = [&](int64_t id) { started = id; };
  auto summary = RunRlJob(config, options);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_EQ(summary->status, "completed");
  EXPECT_EQ(summary->job_id, started);
  EXPECT_EQ(summary->groups_total, 4);  // 2 tasks x 2 efforts
  EXPECT_EQ(summary->groups_done, 4);
  EXPECT_EQ(summary->samples_done, 8);
  EXPECT_GT(summary->busy_fraction, 0.0);

  auto db = Store();
  EXPECT_EQ(Count(*db, "SELECT count(*) FROM samples WHERE status IN ('completed', 'failed')"), 8);
  EXPECT_EQ(Count(*db, "SELECT count(*) FROM jobs WHERE status = 'completed'"), 1);
  EXPECT_EQ(Count(*db, "SELECT count(DISTINCT group_id) FROM samples"), 4);
  EXPECT_EQ(Count(*db, "SELECT count(*) FROM (SELECT group_id FROM samples GROUP BY group_id"
                       " HAVING count(DISTINCT effort) = 1 AND count(DISTINCT task_id) = 1)"),
            4)
      << "a group is one task at one effort";

  LengthRewardParams params;
  params.l_norm = 1024;
  for (int64_t group = 1; group <= 4; ++group) {
    auto samples = LoadGroupSamples(*db, started, group);
    ASSERT_TRUE(samples.ok()) << samples.status().ToString();
    ASSERT_EQ(samples->size(), 2u);
    double advantage_sum = 0;
    for (const StoredSample& s : *samples) {
      const TrainingSample& t = s.sample;
      ASSERT_EQ(t.status, "completed") << s.error;
      ASSERT_TRUE(s.advantage.has_value());
      advantage_sum += *s.advantage;
      // reward = verifier + length, the length part from the stored l.
      const double length = LengthReward(params, s.effort, t.reasoning_tokens);
      EXPECT_NEAR(t.reward_parts.at("length"), length, 1e-12);
      EXPECT_NEAR(t.reward, t.reward_parts.at("verifier") + length, 1e-12);
      ASSERT_EQ(t.logprobs.size(), t.tokens.size());
      ASSERT_EQ(t.versions.size(), t.tokens.size());
      ASSERT_EQ(t.loss_mask.size(), t.tokens.size());
      int64_t sampled = 0;
      for (size_t i = 0; i < t.tokens.size(); ++i) {
        if (t.versions[i] >= 0) {
          ++sampled;
          EXPECT_EQ(t.versions[i], 0);
          EXPECT_EQ(t.loss_mask[i], 1);
          EXPECT_LE(t.logprobs[i], 0.0f);
        } else {
          EXPECT_EQ(t.loss_mask[i], 0) << "environment tokens are never learned from";
          EXPECT_EQ(t.logprobs[i], 0.0f);
        }
      }
      EXPECT_GT(sampled, 0);
      EXPECT_GT(t.prompt_tokens, 0);
      EXPECT_EQ(t.versions[static_cast<size_t>(t.prompt_tokens)], 0) << "the first sampled token follows the prompt";
      EXPECT_LT(t.reasoning_tokens, sampled);
      if (s.effort == 100) {
        EXPECT_GT(t.reasoning_tokens, 0) << "at full effort the default model reasons";
      }
    }
    EXPECT_NEAR(advantage_sum, 0.0, 1e-9) << "group " << group;
  }
}

TEST_F(RlJobTest, ExportWritesOneLinePerFinishedSampleAsStored) {
  const JobConfig config = Load(WriteConfig("exported", 1));
  auto summary = RunRlJob(config, {});
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  const std::string out = dir_ + "/samples.jsonl";
  const std::string command = std::string(FLASHROLL_BIN) + " export --store " + dir_ + "/store.db --job exported --output " + out;
  ASSERT_EQ(std::system(command.c_str()), 0);
  std::ifstream in(out);
  auto db = Store();
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    const nlohmann::json j = nlohmann::json::parse(line);
    for (const char* key : {"sample_id", "task_id", "group_id", "effort", "token_ids", "logprobs", "versions",
                            "loss_mask", "reward", "reward_parts", "advantage", "status", "failure_kind"}) {
      EXPECT_TRUE(j.contains(key)) << key;
    }
    EXPECT_TRUE(j["failure_kind"].is_null()) << "every sample ran to the agent's own outcome";
    auto stored = LoadStoredSample(*db, j["sample_id"].get<int64_t>());
    ASSERT_TRUE(stored.ok());
    EXPECT_EQ(j["token_ids"].get<std::vector<int32_t>>(), stored->sample.tokens);
    EXPECT_EQ(j["logprobs"].get<std::vector<float>>(), stored->sample.logprobs) << "float32 values round-trip";
    EXPECT_EQ(j["loss_mask"].get<std::vector<uint8_t>>(), stored->sample.loss_mask);
    EXPECT_EQ(j["reward"].get<double>(), stored->sample.reward);
  }
  EXPECT_EQ(lines, 4);  // 1 task x 2 efforts x G = 2
  EXPECT_NE(std::system((std::string(FLASHROLL_BIN) + " export --store " + dir_ + "/store.db --job nobody 2>/dev/null").c_str()), 0);
}

TEST_F(RlJobTest, TasksFromAFileRunAndAreStoredWithTheirVerifier) {
  std::ofstream(dir_ + "/tasks.jsonl")
      << R"({"id": "count-words", "prompt": "How many words are in words.txt? Answer with the number.", )"
      << R"("files": [{"path": "words.txt", "contents": "one two three\n"}], "answer": "3"})" << "\n"
      << R"({"id": "any-number", "prompt": "Say a number.", "verifier": {"kind": "regex", "pattern": "-?[0-9]+"}})" << "\n";
  const std::string path = dir_ + "/file-tasks.yaml";
  std::ofstream(path) << "kind: rl_job\nname: file-tasks\nstore: " << dir_ << "/store.db\n"
                      << "model: {path: models/default, threads: 2}\n"
                      << "tasks: {files: [" << dir_ << "/tasks.jsonl]}\n"
                      << "rollout: {max_turns: 3, max_tokens: 512, efforts: [50]}\n"
                      << "scheduler: {group_size: 2, max_in_flight: 4, max_per_task: 4}\n"
                      << "training: none\n";
  auto summary = RunRlJob(Load(path), {});
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_EQ(summary->groups_done, 2);
  auto db = Store();
  EXPECT_EQ(Count(*db, "SELECT count(*) FROM tasks WHERE family = 'file'"), 2);
  EXPECT_EQ(Count(*db, "SELECT count(*) FROM tasks WHERE verifier_json LIKE '%\"kind\":\"regex\"%'"), 1);
  EXPECT_EQ(Count(*db, "SELECT count(*) FROM samples WHERE status IN ('completed', 'failed')"), 4);
}

// policy.url: the turns come from an OpenAI-compatible server (here the
// default model behind Flashroll's own, in process); an unreachable one
// fails each sample with the endpoint in its error, and the job goes on.
TEST_F(RlJobTest, AnExternalPolicyServesTheTurnsAndAnUnreachableOneFailsSamplesNotTheJob) {
  auto model = engine::Model::Load("models/default");
  ASSERT_TRUE(model.ok());
  auto tokenizer = engine::LoadModelTokenizer(**model);
  ASSERT_TRUE(tokenizer.ok());
  engine::EngineOptions engine_options;
  engine_options.threads = 2;
  auto engine = engine::Engine::Start(**model, tokenizer->get(), engine_options);
  ASSERT_TRUE(engine.ok());
  engine::OpenAiServerOptions server_options;
  server_options.port = 0;
  server_options.model_name = "served-default";
  auto server = engine::OpenAiServer::Start(engine->get(), tokenizer->get(), server_options);
  ASSERT_TRUE(server.ok()) << server.status().ToString();

  const JobConfig remote = Load(WriteConfig("remote", 1, "policy: {url: '" + (*server)->base_url() + "', model: served-default}\n"));
  auto summary = RunRlJob(remote, {});
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_EQ(summary->groups_done, 2);
  EXPECT_GT((*engine)->Stats().generated_tokens, 0) << "the server's engine generated the turns";
  auto db = Store();
  EXPECT_EQ(Count(*db, "SELECT count(*) FROM samples WHERE status = 'completed'"), 4);
  auto samples = LoadGroupSamples(*db, summary->job_id, 1);
  ASSERT_TRUE(samples.ok());
  for (const StoredSample& s : *samples) {
    int64_t sampled = 0;
    for (size_t i = 0; i < s.sample.tokens.size(); ++i) {
      if (s.sample.versions[i] < 0) continue;
      ++sampled;
      EXPECT_EQ(s.sample.versions[i], 0);
      EXPECT_LE(s.sample.logprobs[i], 0.0f);
    }
    EXPECT_GT(sampled, 0);
  }

  // The endpoint down is no outcome of the agent's: each slot runs again
  // scheduler.infra_retries (2) times, every attempt recorded with its kind
  // (the retried ones superseded), none rewarded or trained on; the task,
  // its slots' retries spent, is quarantined and reported.
  const JobConfig down = Load(WriteConfig("down", 1, "policy: {url: 'http://127.0.0.1:1', model: served-default}\n"));
  auto failed = RunRlJob(down, {});
  ASSERT_TRUE(failed.ok()) << failed.status().ToString();
  EXPECT_EQ(failed->groups_done, 2);
  auto stmt = db->Prepare("SELECT status, error, failure_kind, reward FROM samples"
                          " WHERE task_id IN (SELECT id FROM tasks WHERE job_id = ?1)");
  ASSERT_TRUE(stmt.ok());
  ASSERT_TRUE(stmt->Bind(1, failed->job_id).ok());
  std::map<std::string, int> by_status;
  while (*stmt->Step()) {
    by_status[stmt->ColumnText(0)] += 1;
    EXPECT_EQ(stmt->ColumnText(2), "policy_unreachable");
    EXPECT_TRUE(stmt->IsNull(3)) << "no reward for an infrastructure failure";
    EXPECT_NE(stmt->ColumnText(1).find("policy http://127.0.0.1:1/v1/completions"), std::string::npos) << stmt->ColumnText(1);
    EXPECT_NE(stmt->ColumnText(1).find(", turn 0"), std::string::npos) << stmt->ColumnText(1);
  }
  EXPECT_EQ(by_status, (std::map<std::string, int>{{"failed", 4}, {"superseded", 8}}));
  EXPECT_EQ(failed->failure_kinds, (std::map<std::string, int64_t>{{"policy_unreachable", 12}}));
  ASSERT_EQ(failed->quarantined_tasks.size(), 1u);
  EXPECT_EQ(failed->failure_kinds_by_task.at(failed->quarantined_tasks[0]).at("policy_unreachable"), 12);
  const Json json = failed->ToJson();
  EXPECT_EQ(json["failure_kinds"]["by_kind"]["policy_unreachable"], 12);
  EXPECT_EQ(json["quarantined_tasks"], Json(failed->quarantined_tasks));
  EXPECT_EQ(failed->groups_unqueued, 2) << "nothing to train on in either group";
  std::ostringstream exported;
  ASSERT_TRUE(ExportJsonl(*db, failed->job_id, exported, /*all_attempts=*/false).ok());
  std::istringstream lines(exported.str());
  int rows = 0;
  for (std::string line; std::getline(lines, line); ++rows) {
    EXPECT_EQ(nlohmann::json::parse(line)["failure_kind"], "policy_unreachable") << line;
  }
  EXPECT_EQ(rows, 4) << "one row per (group, slot)";
}

// A task whose own setup command runs out of its sandbox's memory before
// the agent's first token: harness_crash, retried (scheduler.infra_retries
// 1) and the task quarantined; the job records the sandbox manager's oom
// events of each attempt's sandbox with the sample (the old job recorded
// only "destroyed").
TEST_F(RlJobTest, ATaskWhoseSetupKeepsFailingIsQuarantinedWithTheManagersEventsRecorded) {
  std::ofstream(dir_ + "/tasks.jsonl")
      << R"({"id": "greedy-setup", "prompt": "Say 1.", "answer": "1", "environment": {"memory": "64M"}, )"
      << R"("setup": ["python3 -c 'x = bytearray(1 << 30)'"]})" << "\n";
  const std::string path = dir_ + "/setup-tasks.yaml";
  std::ofstream(path) << "kind: rl_job\nname: setup-tasks\nstore: " << dir_ << "/store.db\n"
                      << "model: {path: models/default, threads: 2}\n"
                      << "tasks: {files: [" << dir_ << "/tasks.jsonl]}\n"
                      << "rollout: {max_turns: 2, max_tokens: 256, efforts: [50, 100]}\n"
                      << "scheduler: {group_size: 1, max_in_flight: 1, max_per_task: 1, infra_retries: 1}\n"
                      << "training: none\n";
  auto summary = RunRlJob(Load(path), {});
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_EQ(summary->quarantined_tasks, std::vector<std::string>{"greedy-setup"});
  EXPECT_EQ(summary->failure_kinds, (std::map<std::string, int64_t>{{"harness_crash", 2}}))
      << "one slot, run twice; the task's group at the other effort never opened";
  EXPECT_EQ(summary->groups_total, 1);
  EXPECT_EQ(summary->groups_done, 1);
  auto db = Store();
  EXPECT_EQ(Count(*db, "SELECT count(*) FROM samples WHERE failure_kind = 'harness_crash' AND reward IS NULL"), 2);
  EXPECT_EQ(Count(*db, "SELECT count(*) FROM samples WHERE status = 'superseded'"), 1);
  EXPECT_EQ(Count(*db, "SELECT count(DISTINCT sample_id) FROM sandbox_events WHERE kind = 'oom'"), 2)
      << "each attempt's sandbox OOM-killed the setup";
  EXPECT_EQ(Count(*db, "SELECT count(*) FROM sandbox_events WHERE kind = 'destroyed'"), 2);
}

TEST_F(RlJobTest, ARunningJobOfTheSameNameIsNotStartedTwice) {
  const JobConfig config = Load(WriteConfig("twice", 1, "scheduler: {group_size: 1, max_in_flight: 1, max_per_task: 1, max_samples: 1}\n"));
  ASSERT_TRUE(RunRlJob(config, {}).ok());
  auto again = RunRlJob(config, {});
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), Code::kAlreadyExists);
  EXPECT_NE(again.status().message().find("resume it with --resume twice"), std::string::npos);
}

// Slot 0 of a group was still running when the job died and slot 1 had
// finished: the resume runs slot 0 (counting finished samples would have
// run slot 1 again, with slot 1's seed, and never slot 0), and keeps the
// interrupted attempt as superseded, out of the export.
TEST_F(RlJobTest, AResumedGroupRunsOnlyItsMissingSlotAndKeepsTheRetriedAttemptAsSuperseded) {
  const JobConfig config = Load(WriteConfig("slots", 1));
  auto first = RunRlJob(config, {});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  int64_t interrupted = 0, kept = 0;
  {
    auto db = Store();
    interrupted = Count(*db, "SELECT id FROM samples WHERE group_id = 1 AND slot = 0");
    kept = Count(*db, "SELECT id FROM samples WHERE group_id = 1 AND slot = 1");
    ASSERT_TRUE(db->Exec("UPDATE samples SET status = 'running' WHERE id = " + std::to_string(interrupted)).ok());
    ASSERT_TRUE(db->Exec("UPDATE jobs SET status = 'paused'").ok());
  }
  RlJobOptions options;
  options.resume = "slots";
  auto resumed = RunRlJob(config, options);
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  EXPECT_EQ(resumed->samples_done, 1) << "only the missing slot ran";

  auto db = Store();
  EXPECT_EQ(Count(*db, "SELECT count(*) FROM samples WHERE status IN ('completed', 'failed')"), 4);
  EXPECT_EQ(Count(*db, "SELECT count(DISTINCT group_id || '/' || slot) FROM samples WHERE status IN ('completed', 'failed')"), 4)
      << "one finished sample per (group, slot)";
  EXPECT_EQ(Count(*db, "SELECT count(*) FROM samples WHERE group_id = 1 AND slot = 0 AND status = 'completed' AND id > " +
                           std::to_string(kept)),
            1) << "slot 0 ran again";
  auto status = db->Prepare("SELECT status, error FROM samples WHERE id = ?1");
  ASSERT_TRUE(status->Bind(1, interrupted).ok());
  ASSERT_TRUE(*status->Step());
  EXPECT_EQ(status->ColumnText(0), "superseded");
  EXPECT_EQ(status->ColumnText(1), "interrupted: the job stopped before the sample finished");

  const auto exported = [&](const std::string& extra) {
    const std::string out = dir_ + "/samples.jsonl";
    const std::string command =
        std::string(FLASHROLL_BIN) + " export --store " + dir_ + "/store.db --job slots --output " + out + extra + " 2>/dev/null";
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
    std::vector<nlohmann::json> lines;
    std::ifstream in(out);
    for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
    return lines;
  };
  std::map<std::pair<int64_t, int64_t>, int> rows;
  for (const nlohmann::json& j : exported("")) {
    ++rows[{j["group_id"].get<int64_t>(), j["slot"].get<int64_t>()}];
    EXPECT_NE(j["sample_id"].get<int64_t>(), interrupted);
    EXPECT_TRUE(j.contains("trained_at_version") && j["trained_at_version"].is_null()) << "no trainer: never consumed";
  }
  EXPECT_EQ(rows, (std::map<std::pair<int64_t, int64_t>, int>{{{1, 0}, 1}, {{1, 1}, 1}, {{2, 0}, 1}, {{2, 1}, 1}}));
  const std::vector<nlohmann::json> all = exported(" --all-attempts");
  ASSERT_EQ(all.size(), 5u);
  EXPECT_EQ(std::count_if(all.begin(), all.end(), [&](const nlohmann::json& j) {
              return j["sample_id"] == interrupted && j["status"] == "superseded" && j["slot"] == 0;
            }),
            1);
}

// The real path: the CLI, SIGKILL mid-job, then --resume.
TEST_F(RlJobTest, ResumeAfterSigkillLosesAndDuplicatesNothing) {
  const std::string config = WriteConfig("killed", 4);
  const pid_t child = scheduler_test::StartRunQuietly(config);
  ASSERT_GE(child, 0);
  // Kill it once some samples finished and others are running.
  const int64_t finished = scheduler_test::WaitForSamples(dir_ + "/store.db", "status = 'completed'", 3);
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int wstatus = 0;
  waitpid(child, &wstatus, 0);
  ASSERT_TRUE(WIFSIGNALED(wstatus));
  ASSERT_GE(finished, 3);

  std::map<int64_t, std::string> before;  // sample id -> its reward, as text
  {
    auto db = Store();
    auto stmt = db->Prepare("SELECT id, reward FROM samples WHERE status = 'completed'");
    while (*stmt->Step()) before[stmt->ColumnInt64(0)] = std::to_string(stmt->ColumnDouble(1));
  }
  ASSERT_LT(static_cast<int64_t>(before.size()), 16) << "the job must be killed before it finished";

  const std::string resume = std::string(FLASHROLL_BIN) + " run " + config + " --resume killed >/dev/null 2>&1";
  ASSERT_EQ(std::system(resume.c_str()), 0);

  auto db = Store();
  EXPECT_EQ(Count(*db, "SELECT count(*) FROM samples WHERE status IN ('completed', 'failed')"), 16);
  EXPECT_EQ(Count(*db, "SELECT count(*) FROM (SELECT group_id FROM samples WHERE status IN ('completed', 'failed')"
                       " GROUP BY group_id HAVING count(*) = 2)"),
            8)
      << "every group has exactly G finished samples";
  EXPECT_EQ(Count(*db, "SELECT count(*) FROM samples WHERE status IN ('queued', 'running')"), 0);
  EXPECT_EQ(Count(*db, "SELECT count(*) FROM tasks"), 4) << "the resumed job reuses its tasks";
  EXPECT_EQ(Count(*db, "SELECT count(*) FROM samples WHERE status = 'completed' AND advantage IS NULL"), 0);
  for (const auto& [id, reward] : before) {
    auto stmt = db->Prepare("SELECT status, reward FROM samples WHERE id = ?1");
    ASSERT_TRUE(stmt->Bind(1, id).ok());
    ASSERT_TRUE(*stmt->Step());
    EXPECT_EQ(stmt->ColumnText(0), "completed") << "sample " << id << " finished before the kill";
    EXPECT_EQ(std::to_string(stmt->ColumnDouble(1)), reward);
  }
  EXPECT_EQ(Count(*db, "SELECT count(*) FROM jobs WHERE status = 'completed'"), 1);
}

}  // namespace
}  // namespace flashroll
