#include "scheduler/job_config.h"

#include <gtest/gtest.h>

namespace flashroll {
namespace {

TEST(JobConfigTest, QuickstartParses) {
  auto file = LoadYamlFile("configs/quickstart.yaml");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto config = ParseJobConfig(*file);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->name, "quickstart");
  EXPECT_EQ(config->model.path, "models/default");
  EXPECT_EQ(config->sandbox.memory_bytes, 256ull << 20);
  EXPECT_EQ(config->sandbox.exec_timeout.count(), 10'000);
  EXPECT_EQ(config->rollout.efforts, (std::vector<int64_t>{50, 100}));
  EXPECT_EQ(config->scheduler.group_size, 4);
  EXPECT_FALSE(config->tasks.families.empty());
}

TEST(JobConfigTest, DefaultsFillOptionalSections) {
  auto file = ParseYaml("kind: rl_job\nname: tiny\nmodel: {path: models/default}\ntasks: {families: [arithmetic]}\n",
                        "tiny.yaml");
  ASSERT_TRUE(file.ok());
  auto config = ParseJobConfig(*file);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->store_path, "runs/tiny.db");
  EXPECT_EQ(config->rollout.scaffold, "bash_block");
  EXPECT_EQ(config->scheduler.group_size, JobConfig{}.scheduler.group_size);
}

TEST(JobConfigTest, CrossFieldRuleNamesKey) {
  auto file = ParseYaml(
      "kind: rl_job\nname: t\nmodel: {path: models/default}\ntasks: {families: [arithmetic]}\n"
      "scheduler:\n  group_size: 8\n  max_per_task: 4\n",
      "t.yaml");
  ASSERT_TRUE(file.ok());
  auto config = ParseJobConfig(*file);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().message().rfind("t.yaml:7: scheduler.max_per_task: must be at least", 0), 0u)
      << config.status().message();
}

TEST(JobConfigTest, EffortOutOfRange) {
  auto file = ParseYaml(
      "kind: rl_job\nname: t\nmodel: {path: models/default}\ntasks: {families: [arithmetic]}\nrollout:\n  efforts: [50, 101]\n",
      "t.yaml");
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(ParseJobConfig(*file).status().message(),
            "t.yaml:6: rollout.efforts[1]: value 101 out of range [1, 100]");
}

Result<JobConfig> Parse(const std::string& yaml) {
  auto file = ParseYaml(yaml, "j.yaml");
  if (!file.ok()) return file.status();
  return ParseJobConfig(*file);
}

constexpr char kHead[] = "kind: rl_job\nname: j\nmodel: {path: models/default}\n";

TEST(JobConfigTest, UnknownTaskFamilyNamesTheItem) {
  auto config = Parse(std::string(kHead) + "tasks:\n  families: [arithmetic, poetry]\n");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().message().rfind("j.yaml:5: tasks.families[1]: unknown task family 'poetry' (known: ", 0), 0u)
      << config.status().message();
}

TEST(JobConfigTest, MissingModelPathIsRefused) {
  auto config = Parse("kind: rl_job\nname: j\nmodel: {path: models/nowhere}\ntasks: {families: [arithmetic]}\n");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().message(), "j.yaml:3: model.path: no such file or directory: models/nowhere");
}

TEST(JobConfigTest, MaxTokensBeyondTheModelsContextIsRefused) {
  auto config = Parse(std::string(kHead) + "tasks: {families: [arithmetic]}\nrollout:\n  max_tokens: 1000000\n");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("j.yaml:6: rollout.max_tokens: 1000000 exceeds the model's context of "),
            std::string::npos)
      << config.status().message();
}

TEST(JobConfigTest, CrossFieldRuleOnADefaultStillHasALine) {
  // max_in_flight comes from the defaults (32) and group_size is above it.
  auto config = Parse(std::string(kHead) + "tasks: {families: [arithmetic]}\nscheduler:\n  group_size: 64\n  max_per_task: 64\n");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().message().rfind("j.yaml:6: scheduler.max_in_flight: must be at least", 0), 0u)
      << config.status().message();
}

TEST(JobConfigTest, DifficultyRangeMustBeOrdered) {
  auto config = Parse(std::string(kHead) + "tasks: {families: [arithmetic], min_difficulty: 7, max_difficulty: 3}\n");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("tasks.min_difficulty: must not exceed"), std::string::npos)
      << config.status().message();
}

TEST(JobConfigTest, TrainingNoneOrAMap) {
  auto none = Parse(std::string(kHead) + "tasks: {families: [arithmetic]}\ntraining: none\n");
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_FALSE(none->training.enabled);
  auto bad = Parse(std::string(kHead) + "tasks: {families: [arithmetic]}\ntraining: always\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "j.yaml:5: training: must be `none` (rollouts only) or a map");
  auto unknown = Parse(std::string(kHead) + "tasks: {families: [arithmetic]}\ntraining: {stepz: 3}\n");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("training.stepz: unknown key"), std::string::npos);
  auto no_token = Parse(std::string(kHead) + "tasks: {families: [arithmetic]}\ntraining: {steps: 3}\n");
  ASSERT_FALSE(no_token.ok());
  EXPECT_NE(no_token.status().message().find("j.yaml:1: trainer_api.token_file: required"), std::string::npos)
      << no_token.status().message();
  auto with_token = Parse(std::string(kHead) +
                          "tasks: {families: [arithmetic]}\ntraining: {steps: 3}\ntrainer_api: {token_file: t}\n");
  ASSERT_TRUE(with_token.ok()) << with_token.status().ToString();
  EXPECT_TRUE(with_token->training.enabled);
  EXPECT_EQ(with_token->training.steps, 3);
}

TEST(JobConfigTest, RateLimitsNameAFamilyOfTheJobAndAPositiveRate) {
  auto ok = Parse(std::string(kHead) + "tasks: {families: [arithmetic]}\nscheduler:\n  rate_limits: {arithmetic: 2.5}\n");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->scheduler.rate_limits.at("arithmetic"), 2.5);
  auto other = Parse(std::string(kHead) + "tasks: {families: [arithmetic]}\nscheduler:\n  rate_limits: {file_sum: 1}\n");
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("scheduler.rate_limits.file_sum: not one of tasks.families"), std::string::npos);
  auto zero = Parse(std::string(kHead) + "tasks: {families: [arithmetic]}\nscheduler:\n  rate_limits: {arithmetic: 0}\n");
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("must be a number of samples per second above 0"), std::string::npos);
}

}  // namespace
}  // namespace flashroll
