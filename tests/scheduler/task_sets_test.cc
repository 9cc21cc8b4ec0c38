// The task sets of the shipped configs never share a task (issue 22, item
// 4): the quickstart's training tasks, its tuning and held-out test sets (the
// same tasks at every effort), and the demonstrations the default models were
// trained on (models/*/demonstrations.json). Before tasks::Instance, 15 of
// the quickstart's 384 evaluation episodes ran a demonstration's task.
#include <fstream>
#include <set>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "scheduler/job_config.h"
#include "tests/slow_tests.h"
#include "tasks/instance.h"
#include "tasks/task.h"

namespace flashroll {
namespace {

// What the agent is given and must answer: two tasks equal in this are one task.
std::string Content(const Task& task) {
  std::string text = task.prompt + "\n" + task.answer;
  for (const TaskFile& file : task.files) text += "\n" + file.path + "\n" + file.contents;
  return text;
}

std::vector<const TaskFamily*> Families(const std::vector<std::string>& names) {
  std::vector<const TaskFamily*> families;
  for (const std::string& name : names) families.push_back(FindTaskFamily(name));
  return families;
}

TEST(TaskSetsTest, TheQuickstartsSetsAndTheDemonstrationsShareNoTask) {
  auto file = LoadYamlFile("configs/quickstart.yaml");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto config = ParseJobConfig(*file);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  const tasks::InstanceSet job_set{Families(config->tasks.families), static_cast<int>(config->tasks.min_difficulty),
                                   static_cast<int>(config->tasks.max_difficulty)};
  // The evaluation's tasks: the tuning set's, then the held-out set's.
  ASSERT_TRUE(config->training.test_seed.has_value());
  const int64_t test_tasks = config->training.test_tasks.value_or(config->training.eval_tasks);
  std::set<std::string> eval_ids;
  std::set<std::string> eval_prompts;
  std::set<uint64_t> eval_seeds;
  for (int64_t i = 0; i < config->training.eval_tasks + test_tasks; ++i) {
    const bool tuning = i < config->training.eval_tasks;
    const tasks::TaskInstance t =
        tuning ? tasks::Instance(tasks::Purpose::kEval, config->training.eval_seed, i, job_set)
               : tasks::Instance(tasks::Purpose::kTest, *config->training.test_seed, i - config->training.eval_tasks,
                                 job_set);
    eval_ids.insert(t.task.id);
    eval_prompts.insert(Content(t.task));
    eval_seeds.insert(t.seed);
  }
  ASSERT_EQ(eval_ids.size(), static_cast<size_t>(config->training.eval_tasks + test_tasks))
      << "the tuning and held-out sets share no task";

  for (const char* model : {"models/default", "models/default-moe"}) {
    std::ifstream in(std::string(model) + "/demonstrations.json");
    ASSERT_TRUE(in) << model;
    const nlohmann::json demos = nlohmann::json::parse(in);
    const tasks::InstanceSet demo_set{Families(demos["families"].get<std::vector<std::string>>()),
                                      demos["min_difficulty"].get<int>(), demos["max_difficulty"].get<int>()};
    // The recorded, legacy instances: their seeds are a range no eval seed is in.
    ASSERT_EQ(demos["instance_recipe"], "legacy");
    const uint64_t first = demos["instance_seeds"]["first"], last = demos["instance_seeds"]["last"];
    EXPECT_EQ(last - first + 1, demos["count"].get<uint64_t>()) << model;
    for (uint64_t seed : eval_seeds) EXPECT_TRUE(seed < first || seed > last) << model << ": " << seed;
    // And today's `rollout demos` with the recorded seed and count: no id,
    // by construction, and (checked) no prompt, files and answer either; the
    // first 3,000 in `make test`, all under FLASHROLL_SLOW_TESTS=1.
    int same_id = 0, same_content = 0;
    const int checked = testing_support::FastOrSlow(3000, demos["count"].get<int>());
    for (int j = 0; j < checked; ++j) {
      const Task task = tasks::Instance(tasks::Purpose::kDemonstrations, demos["seed"], j, demo_set).task;
      same_id += eval_ids.count(task.id);
      same_content += eval_prompts.count(Content(task));
    }
    EXPECT_EQ(same_id, 0) << model;
    EXPECT_EQ(same_content, 0) << model;
  }

  // The training tasks: no id, and the eval set's are not among them.
  int shared = 0;
  for (int64_t i = 0; i < config->tasks.count; ++i) {
    shared += eval_ids.count(tasks::Instance(tasks::Purpose::kTrain, config->tasks.seed, i, job_set).task.id);
  }
  EXPECT_EQ(shared, 0);
}

}  // namespace
}  // namespace flashroll
