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
  auto file = ParseYaml("kind: rl_job\nname: tiny\nmodel: {path: m}\ntasks: {families: [arithmetic]}\n",
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
      "kind: rl_job\nname: t\nmodel: {path: m}\ntasks: {families: [a]}\n"
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
      "kind: rl_job\nname: t\nmodel: {path: m}\ntasks: {families: [a]}\nrollout:\n  efforts: [50, 101]\n",
      "t.yaml");
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(ParseJobConfig(*file).status().message(),
            "t.yaml:6: rollout.efforts[1]: value 101 out of range [1, 100]");
}

}  // namespace
}  // namespace flashroll
