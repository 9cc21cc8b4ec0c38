#include "scheduler/trainer_supervisor.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "tests/scheduler/job_process_util.h"

namespace flashroll {
namespace {

using scheduler_test::ReadAll;

ChildOptions Shell(const std::string& script, const std::string& log = "") {
  ChildOptions options;
  options.argv = {"/bin/sh", "-c", script};
  options.output_path = log;
  return options;
}

TEST(TrainerArgvTest, DefaultCommandAndTheFlagsEveryTrainerTakes) {
  JobConfig config;
  config.model.path = "models/default";
  config.trainer_api.token_file = "tok";
  config.training.enabled = true;
  config.training.steps = 7;
  config.training.learning_rate = 3e-5;
  config.training.checkpoint_dir = "runs/ck";
  config.scheduler.batch_groups = 2;
  config.rollout.temperature = 0.7;
  const std::vector<std::string> argv = TrainerArgv(config, {"http://127.0.0.1:9", "runs/t.jsonl", "", "", ""});
  ASSERT_GE(argv.size(), 3u);
  EXPECT_EQ(std::vector<std::string>(argv.begin(), argv.begin() + 3),
            (std::vector<std::string>{"/usr/bin/python3", "-m", "flashroll.trainers.grpo"}));
  auto flag = [&](const std::string& name) -> std::string {
    auto it = std::find(argv.begin(), argv.end(), name);
    return it != argv.end() && it + 1 != argv.end() ? *(it + 1) : "<missing>";
  };
  EXPECT_EQ(flag("--api"), "http://127.0.0.1:9");
  EXPECT_EQ(flag("--token-file"), "tok");
  EXPECT_EQ(flag("--model"), "models/default");
  EXPECT_EQ(flag("--checkpoint-root"), "runs/ck");
  EXPECT_EQ(flag("--steps"), "7");
  EXPECT_EQ(flag("--lr"), "3e-05");
  EXPECT_EQ(flag("--groups-per-step"), "2");
  EXPECT_EQ(flag("--temperature"), "0.7");
  EXPECT_EQ(flag("--loss-agg"), "token_mean");
  EXPECT_EQ(flag("--max-tokens"), std::to_string(config.rollout.max_tokens)) << "dr_grpo's per-sample constant";
  EXPECT_EQ(flag("--log"), "runs/t.jsonl");
  EXPECT_EQ(flag("--teacher-url"), "<missing>");
  EXPECT_EQ(flag("--negative-weight"), "1");
  EXPECT_EQ(flag("--entropy-weight"), "0");
  config.training.negative_weight = 0.25;
  config.training.entropy_weight = 0.125;
  const std::vector<std::string> weighted = TrainerArgv(config, {"u", "l", "", "", ""});
  EXPECT_EQ(*(std::find(weighted.begin(), weighted.end(), "--negative-weight") + 1), "0.25");
  EXPECT_EQ(*(std::find(weighted.begin(), weighted.end(), "--entropy-weight") + 1), "0.125");

  EXPECT_EQ(flag("--clip"), "0.2");
  EXPECT_EQ(flag("--ratio-bound"), "dual_clip") << "the stale-token bound is on by default";
  EXPECT_EQ(flag("--ratio-cap"), "3");

  config.training.algorithm = "distill";
  config.training.command = {"my-trainer", "--x"};
  const std::vector<std::string> distill =
      TrainerArgv(config, {"http://127.0.0.1:9", "t.jsonl", "http://127.0.0.1:10", "teacher", "tok"});
  EXPECT_EQ(distill[0], "my-trainer");
  EXPECT_EQ(distill[1], "--x");
  EXPECT_EQ(*(std::find(distill.begin(), distill.end(), "--teacher-url") + 1), "http://127.0.0.1:10");
  EXPECT_EQ(*(std::find(distill.begin(), distill.end(), "--teacher-model") + 1), "teacher");
  EXPECT_EQ(*(std::find(distill.begin(), distill.end(), "--teacher-token-file") + 1), "tok");
  for (const char* grpo_flag : {"--negative-weight", "--entropy-weight", "--clip", "--kl", "--ratio-bound"}) {
    EXPECT_EQ(std::find(distill.begin(), distill.end(), grpo_flag), distill.end()) << grpo_flag << " is grpo's";
  }
}

// The job's own argv, as TrainerArgv builds it for each algorithm, parsed by
// the real trainer module's parser the way loop.main builds it
// (loop.arg_parser + the module's add_flags): a flag a trainer does not
// take would make it exit 2 at start.
std::string ParseWithTheTrainersParser(const std::vector<std::string>& argv) {
  std::string command = "PYTHONPATH=" FLASHROLL_SOURCE_DIR "/python /usr/bin/python3 -c '"
                        "import importlib, sys; "
                        "from flashroll.trainers import loop; "
                        "module = importlib.import_module(sys.argv[1]); "
                        "parser = loop.arg_parser(\"test\"); "
                        "module.add_flags(parser); "
                        "print(sorted(vars(parser.parse_args(sys.argv[2:])).items()))' " + argv[2];
  for (size_t i = 3; i < argv.size(); ++i) command += " '" + argv[i] + "'";
  command += " 2>&1";
  std::string output;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return "popen failed";
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof(buffer), pipe)) output.append(buffer, n);
  const int status = ::pclose(pipe);
  return (status == 0 ? "ok " : "exit " + std::to_string(status) + " ") + output;
}

TEST(TrainerArgvTest, EachAlgorithmsTrainerParsesTheArgvTheJobBuildsForIt) {
  JobConfig config;
  config.trainer_api.token_file = "tok";
  config.training.enabled = true;
  config.training.checkpoint_dir = "ck";
  config.training.ratio_bound = "truncated_is";
  config.training.ratio_cap = 5;
  const std::string grpo = ParseWithTheTrainersParser(TrainerArgv(config, {"http://127.0.0.1:9", "t.jsonl", "", "", ""}));
  EXPECT_EQ(grpo.rfind("ok ", 0), 0u) << grpo;
  EXPECT_NE(grpo.find("('ratio_bound', 'truncated_is')"), std::string::npos) << grpo;
  EXPECT_NE(grpo.find("('ratio_cap', 5.0)"), std::string::npos) << grpo;

  config.training.algorithm = "distill";
  const std::string distill = ParseWithTheTrainersParser(
      TrainerArgv(config, {"http://127.0.0.1:9", "t.jsonl", "http://127.0.0.1:10", "default-moe", "tok"}));
  EXPECT_EQ(distill.rfind("ok ", 0), 0u) << distill;
  EXPECT_NE(distill.find("('teacher_url', 'http://127.0.0.1:10')"), std::string::npos) << distill;
  EXPECT_NE(distill.find("('teacher_model', 'default-moe')"), std::string::npos) << distill;
  EXPECT_NE(distill.find("('teacher_token_file', 'tok')"), std::string::npos) << distill;
}

TEST(TrainerSupervisorTest, ATrainerThatSucceedsEndsOk) {
  auto s = TrainerSupervisor::Start(Shell("exit 0"), 2, nullptr);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE((*s)->Wait().ok());
  EXPECT_TRUE((*s)->finished());
  EXPECT_EQ((*s)->restarts_used(), 0);
}

TEST(TrainerSupervisorTest, ADyingTrainerIsRestartedThenTheJobIsTold) {
  const std::string log = ::testing::TempDir() + "/supervised.log";
  std::filesystem::remove(log);
  std::vector<std::string> events;
  std::mutex mu;
  auto s = TrainerSupervisor::Start(Shell("echo run; exit 3", log), 2, [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(mu);
    events.push_back(line);
  });
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const Status result = (*s)->Wait();
  EXPECT_EQ(result.code(), Code::kInternal);
  EXPECT_EQ(result.message(), "trainer exited with status 3 after 2 restarts (log: " + log + ")");
  EXPECT_EQ((*s)->restarts_used(), 2);
  EXPECT_EQ(ReadAll(log), "run\nrun\nrun\n") << "started three times";
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[1], "trainer exited with status 3; restart 1 of 2 (log: " + log + ")");
}

TEST(TrainerSupervisorTest, ARestartedTrainerThatThenSucceedsEndsOk) {
  const std::string marker = ::testing::TempDir() + "/supervised.marker";
  std::filesystem::remove(marker);
  // Fails the first time, succeeds once the marker exists: a trainer that resumes.
  auto s = TrainerSupervisor::Start(Shell("test -e " + marker + " && exit 0; touch " + marker + "; exit 1"), 1, nullptr);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE((*s)->Wait().ok());
  EXPECT_EQ((*s)->restarts_used(), 1);
}

TEST(TrainerSupervisorTest, StopEndsARunningTrainerWithoutARestart) {
  auto s = TrainerSupervisor::Start(Shell("sleep 30"), 5, nullptr);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_FALSE((*s)->finished());
  const auto start = std::chrono::steady_clock::now();
  (*s)->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_TRUE((*s)->finished());
  EXPECT_TRUE((*s)->Wait().ok());
  EXPECT_EQ((*s)->restarts_used(), 0);
}

TEST(TrainerSupervisorTest, AMissingProgramFailsAtStart) {
  ChildOptions options;
  options.argv = {"/nonexistent/trainer"};
  EXPECT_EQ(TrainerSupervisor::Start(options, 1, nullptr).status().code(), Code::kNotFound);
}

}  // namespace
}  // namespace flashroll
