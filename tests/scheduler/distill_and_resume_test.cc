// `flashroll run` end to end for what a user types: a distillation job with
// nothing prepared (no token file, the teacher served by the job), and a
// job interrupted with SIGINT and resumed by name alone.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/store.h"
#include "tests/scheduler/job_process_util.h"

namespace flashroll {
namespace {

using scheduler_test::ReadAll;

class RunCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/run_command_test.XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  int Run(const std::string& args, std::string* output) {
    const std::string out = dir_ + "/out.txt";
    const int status = std::system((std::string(FLASHROLL_BIN) + " " + args + " > " + out + " 2>&1").c_str());
    *output = ReadAll(out);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  std::string dir_;
};

TEST_F(RunCommandTest, ADistillationJobStartsWithNothingPreparedAndLogsReverseKl) {
  const std::string config = dir_ + "/d.yaml";
  std::ofstream(config) << "kind: rl_job\nname: d\nstore: " << dir_ << "/d.db\n"
                        << "model: {path: models/default, threads: 2}\n"
                        << "tasks: {families: [arithmetic], count: 2, seed: 5}\n"
                        << "rollout: {max_turns: 2, max_tokens: 256, temperature: 1.0, efforts: [100]}\n"
                        << "scheduler: {group_size: 2, max_in_flight: 2, max_per_task: 2, batch_groups: 1}\n"
                        << "training:\n  algorithm: distill\n  steps: 1\n  teacher: {model: models/default-moe}\n"
                        << "trainer_api: {listen: '127.0.0.1:0', token_file: " << dir_ << "/fresh/token}\n";
  std::string output;
  ASSERT_EQ(Run("run " + config, &output), 0) << output << ReadAll(dir_ + "/d-trainer.log");
  EXPECT_NE(output.find("completed"), std::string::npos) << output;
  struct stat st{};
  ASSERT_EQ(::stat((dir_ + "/fresh/token").c_str(), &st), 0) << "the job made the token file";
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(ReadAll(dir_ + "/fresh/token").size(), 33u) << "32 hex digits and a newline";
  const nlohmann::json step = nlohmann::json::parse(ReadAll(dir_ + "/d-trainer.jsonl"));
  EXPECT_EQ(step["step"], 1);
  ASSERT_TRUE(step["reverse_kl"].is_number()) << step.dump();
  EXPECT_GT(step["reverse_kl"].get<double>(), 0.0) << "the MoE teacher is not the student";
}

TEST_F(RunCommandTest, AnInterruptedJobResumesByNameAloneAndAnotherConfigIsRefusedNamingTheKey) {
  const std::string config = dir_ + "/r.yaml";
  const std::string store = dir_ + "/r.db";
  const std::string yaml = "kind: rl_job\nname: r\nstore: " + store + "\nmodel: {path: models/default, threads: 2}\n"
                           "tasks: {families: [arithmetic], count: 6, seed: 5}\n"
                           "rollout: {max_turns: 2, max_tokens: 192, efforts: [100]}\n"
                           "scheduler: {group_size: 2, max_in_flight: 2, max_per_task: 2}\n"
                           "training: none\n";
  std::ofstream(config) << yaml;
  const pid_t child = scheduler_test::StartRunQuietly(config);
  ASSERT_GT(child, 0);
  ASSERT_GE(scheduler_test::WaitForSamples(store, "status = 'completed'", 1), 1);
  ASSERT_EQ(kill(child, SIGINT), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130) << "paused";

  // Another config is refused before anything runs, naming the key.
  const std::string other = dir_ + "/other.yaml";
  std::string changed = yaml;
  changed.replace(changed.find("count: 6"), 8, "count: 7");
  std::ofstream(other) << changed;
  std::string output;
  EXPECT_NE(Run("run --resume r " + other, &output), 0) << output;
  EXPECT_NE(output.find(other + ":5: tasks.count: differs from the config job 'r' was started with (7 here, 6 there)"),
            std::string::npos)
      << output;

  // The config file gone, the job resumes from its store.
  std::filesystem::remove(config);
  ASSERT_EQ(Run("run --resume r --store " + store, &output), 0) << output;
  EXPECT_NE(output.find("completed: 6/6 groups"), std::string::npos) << output;
  auto db = store::OpenStore(store);
  ASSERT_TRUE(db.ok());
  auto stmt = (*db)->Prepare("SELECT count(*) FROM samples WHERE status = 'completed'");
  ASSERT_TRUE(stmt.ok() && *stmt->Step());
  EXPECT_EQ(stmt->ColumnInt64(0), 12);
  EXPECT_NE(Run("run --resume r --store " + dir_ + "/none.db", &output), 0);
  EXPECT_NE(output.find("--store: no such file: " + dir_ + "/none.db"), std::string::npos) << output;
}

}  // namespace
}  // namespace flashroll
