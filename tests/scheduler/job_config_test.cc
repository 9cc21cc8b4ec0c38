#include "scheduler/job_config.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

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
  EXPECT_EQ(config->rollout.efforts, (std::vector<int64_t>{1, 50, 100}));
  EXPECT_TRUE(config->training.enabled);
  EXPECT_EQ(config->training.algorithm, "grpo");
  EXPECT_EQ(config->scheduler.group_size, 8);
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
  EXPECT_EQ(config->scheduler.stall_timeout, std::chrono::minutes(10)) << "a job that makes no progress fails after 10 min";
}

// sandbox.disk: the writable root's bytes on disk, independent of memory.
TEST(JobConfigTest, SandboxDiskIsReadAndChecked) {
  const std::string head = "kind: rl_job\nname: d\nmodel: {path: models/default}\ntasks: {families: [arithmetic]}\n";
  auto defaults = ParseJobConfig(*ParseYaml(head, "d.yaml"));
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_EQ(defaults->sandbox.disk_bytes, 1ull << 30);
  auto set = ParseJobConfig(*ParseYaml(head + "sandbox: {memory: 64M, disk: 256M}\n", "d.yaml"));
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->sandbox.disk_bytes, 256ull << 20);
  EXPECT_EQ(set->sandbox.memory_bytes, 64ull << 20);
  auto tiny = ParseJobConfig(*ParseYaml(head + "sandbox: {disk: 4K}\n", "d.yaml"));
  ASSERT_FALSE(tiny.ok());
  EXPECT_NE(tiny.status().message().find("sandbox.disk"), std::string::npos) << tiny.status().ToString();
}

TEST(JobConfigTest, LengthPenaltyOnAllOrOnlySuccessfulSamples) {
  const std::string head = "kind: rl_job\nname: r\nmodel: {path: models/default}\ntasks: {families: [arithmetic]}\n";
  auto defaults = ParseJobConfig(*ParseYaml(head, "r.yaml"));
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_EQ(defaults->rewards.length_penalty, "all");
  auto success = ParseJobConfig(*ParseYaml(head + "rewards: {length_penalty: success}\n", "r.yaml"));
  ASSERT_TRUE(success.ok()) << success.status().ToString();
  EXPECT_EQ(success->rewards.length_penalty, "success");
  auto bad = ParseJobConfig(*ParseYaml(head + "rewards: {length_penalty: failures}\n", "r.yaml"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("r.yaml:5: rewards.length_penalty: "), std::string::npos)
      << bad.status().message();
}

// scheduler.dynamic_sampling and scheduler.task_selection (group_selection.h):
// off by default; the range must leave room for a cell to open.
TEST(JobConfigTest, DynamicSamplingAndTaskSelectionAreReadAndChecked) {
  const std::string head = "kind: rl_job\nname: s\nmodel: {path: models/default}\ntasks: {families: [arithmetic]}\n";
  auto defaults = ParseJobConfig(*ParseYaml(head, "s.yaml"));
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_EQ(defaults->scheduler.dynamic_sampling, "none");
  EXPECT_FALSE(defaults->scheduler.task_selection.enabled);
  auto set = ParseJobConfig(*ParseYaml(head + "scheduler: {dynamic_sampling: verifier, task_selection: "
                                              "{min_pass_rate: 0.05, max_pass_rate: 0.95, window: 32, "
                                              "min_samples: 8, probe_every: 4}}\n", "s.yaml"));
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->scheduler.dynamic_sampling, "verifier");
  const PassRateSelection& t = set->scheduler.task_selection;
  EXPECT_TRUE(t.enabled);
  EXPECT_EQ(t.min_pass_rate, 0.05);
  EXPECT_EQ(t.max_pass_rate, 0.95);
  EXPECT_EQ(t.window, 32);
  EXPECT_EQ(t.min_samples, 8);
  EXPECT_EQ(t.probe_every, 4);
  auto on = ParseJobConfig(*ParseYaml(head + "scheduler: {task_selection: {}}\n", "s.yaml"));
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  EXPECT_TRUE(on->scheduler.task_selection.enabled) << "present, even empty, turns it on";
  for (const auto& [bad, key] : std::vector<std::pair<std::string, std::string>>{
           {"{dynamic_sampling: sometimes}", "scheduler.dynamic_sampling"},
           {"{task_selection: {min_pass_rate: 0.6, max_pass_rate: 0.4}}", "scheduler.task_selection.min_pass_rate"},
           {"{task_selection: {window: 8, min_samples: 9}}", "scheduler.task_selection.min_samples"},
           {"{task_selection: {probe_every: 0}}", "scheduler.task_selection.probe_every"},
           {"{task_selection: {max_pass_rate: 1.5}}", "scheduler.task_selection.max_pass_rate"}}) {
    auto refused = ParseJobConfig(*ParseYaml(head + "scheduler: " + bad + "\n", "s.yaml"));
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_NE(refused.status().message().find(key), std::string::npos) << refused.status().ToString();
  }
}

TEST(JobConfigTest, EvalTemperaturesAreReadInOrderAndEachOnce) {
  const std::string head = "kind: rl_job\nname: e\nmodel: {path: models/default}\ntasks: {families: [arithmetic]}\n"
                           "trainer_api: {token_file: t}\n";
  auto set = ParseJobConfig(*ParseYaml(head + "training: {eval_tasks: 4, eval_temperatures: [1.0, 0.7, 0]}\n", "e.yaml"));
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->training.eval_temperatures, (std::vector<double>{1.0, 0.7, 0.0}));
  auto twice = ParseJobConfig(*ParseYaml(head + "training: {eval_temperatures: [1.0, 0.7, 1]}\n", "e.yaml"));
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("training.eval_temperatures[2]: listed twice"), std::string::npos)
      << twice.status().ToString();
}

TEST(JobConfigTest, UnenforcedSandboxLimitsAreAllowedOnlyWhenAsked) {
  const std::string head = "kind: rl_job\nname: r\nmodel: {path: models/default}\ntasks: {families: [arithmetic]}\n";
  auto defaults = ParseJobConfig(*ParseYaml(head, "r.yaml"));
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_FALSE(defaults->sandbox.allow_unenforced_limits);
  auto allowed = ParseJobConfig(*ParseYaml(head + "sandbox: {allow_unenforced_limits: true}\n", "r.yaml"));
  ASSERT_TRUE(allowed.ok()) << allowed.status().ToString();
  EXPECT_TRUE(allowed->sandbox.allow_unenforced_limits);
  auto bad = ParseJobConfig(*ParseYaml(head + "sandbox: {allow_unenforced_limits: maybe}\n", "r.yaml"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("sandbox.allow_unenforced_limits"), std::string::npos) << bad.status().message();
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
            "t.yaml:6: rollout.efforts[1]: reasoning effort \"101\" is not one of \"low\" (50), \"high\" (75), "
            "\"max\" (100) or an integer 1-100");
}

// The chat API's presets (common/reasoning_effort.h) name efforts in a job too.
TEST(JobConfigTest, EffortsTakeThePresets) {
  auto file = ParseYaml(
      "kind: rl_job\nname: t\nmodel: {path: models/default}\ntasks: {families: [arithmetic]}\nrollout:\n"
      "  efforts: [1, low, high, max]\n",
      "t.yaml");
  ASSERT_TRUE(file.ok());
  auto config = ParseJobConfig(*file);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->rollout.efforts, (std::vector<int64_t>{1, 50, 75, 100}));
  for (const char* bad : {"medium", "[50]", "50.5"}) {
    auto wrong = ParseYaml(std::string("kind: rl_job\nname: t\nmodel: {path: models/default}\ntasks: {families: [arithmetic]}\n"
                                       "rollout:\n  efforts: [") + bad + "]\n", "t.yaml");
    ASSERT_TRUE(wrong.ok());
    EXPECT_NE(ParseJobConfig(*wrong).status().message().find("rollout.efforts[0]:"), std::string::npos) << bad;
  }
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

// scheduler.infra_retries: how often a slot runs again after an
// infrastructure failure (default 2), 0..100, a bad value naming the key.
TEST(JobConfigTest, InfraRetriesAreReadAndChecked) {
  auto defaults = Parse(std::string(kHead) + "tasks: {families: [arithmetic]}\n");
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_EQ(defaults->scheduler.infra_retries, 2);
  auto none = Parse(std::string(kHead) + "tasks: {families: [arithmetic]}\nscheduler: {infra_retries: 0}\n");
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(none->scheduler.infra_retries, 0);
  auto bad = Parse(std::string(kHead) + "tasks: {families: [arithmetic]}\nscheduler: {infra_retries: 101}\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("scheduler.infra_retries"), std::string::npos) << bad.status().message();
}

// model.device: where the embedded engine runs; checked as it parses.
TEST(JobConfigTest, ModelDeviceIsReadAndChecked) {
  auto defaults = Parse(std::string(kHead) + "tasks: {families: [arithmetic]}\n");
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_EQ(defaults->model.device, "cpu");
  auto gpu = Parse("kind: rl_job\nname: j\nmodel: {path: models/default, device: 'cuda:1'}\ntasks: {families: [arithmetic]}\n");
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  EXPECT_EQ(gpu->model.device, "cuda:1");
  auto bad = Parse("kind: rl_job\nname: j\nmodel: {path: models/default, device: tpu}\ntasks: {families: [arithmetic]}\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "j.yaml:3: model.device: 'tpu' is not a device (expected cpu, cuda or cuda:N)");
}

// model.sessions (default true) and model.reprefill_older_than (default -1,
// off; -1 or at least 0), a bad value naming the key.
TEST(JobConfigTest, SessionsAndReprefillOlderThanAreReadAndChecked) {
  auto defaults = Parse(std::string(kHead) + "tasks: {families: [arithmetic]}\n");
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_TRUE(defaults->model.sessions);
  EXPECT_EQ(defaults->model.reprefill_older_than, -1);
  auto set = Parse("kind: rl_job\nname: j\nmodel: {path: models/default, sessions: false, reprefill_older_than: 2}\n"
                   "tasks: {families: [arithmetic]}\n");
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_FALSE(set->model.sessions);
  EXPECT_EQ(set->model.reprefill_older_than, 2);
  auto bad = Parse("kind: rl_job\nname: j\nmodel: {path: models/default, reprefill_older_than: -2}\n"
                   "tasks: {families: [arithmetic]}\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("model.reprefill_older_than"), std::string::npos) << bad.status().message();
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

TEST(JobConfigTest, EntropyWeightOutOfRangeNamesItsKey) {
  const std::string head = std::string(kHead) + "store: runs/x/j.db\ntasks: {families: [arithmetic]}\n";
  const std::string tail = "trainer_api: {token_file: t}\n";
  auto entropy = Parse(head + "training:\n  steps: 2\n  entropy_weight: -11\n" + tail);
  ASSERT_FALSE(entropy.ok());
  EXPECT_NE(entropy.status().message().find("training.entropy_weight"), std::string::npos)
      << entropy.status().message();
}

TEST(JobConfigTest, TrainingSettingsAndTheirDefaults) {
  const std::string head = std::string(kHead) + "store: runs/x/j.db\ntasks: {families: [arithmetic]}\n";
  auto defaults = Parse(head + "training: {steps: 2}\ntrainer_api: {token_file: t}\n");
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_EQ(defaults->training.algorithm, "grpo");
  EXPECT_EQ(defaults->training.checkpoint_dir, "runs/x/j-checkpoints");
  EXPECT_TRUE(defaults->training.command.empty());
  EXPECT_EQ(defaults->training.eval_tasks, 0);
  EXPECT_FALSE(defaults->training.test_seed.has_value());
  EXPECT_EQ(defaults->trainer_api.lease_timeout, std::chrono::minutes(10));
  auto all = Parse(head +
                   "training:\n  algorithm: grpo\n  steps: 5\n  learning_rate: 0.001\n  clip: 0.3\n  kl: 0.05\n  negative_weight: 0.5\n"
                   "  entropy_weight: -0.5\n"
                   "  grad_clip: 2\n  loss_agg: dr_grpo\n  command: [my-trainer, --fast]\n  checkpoint_dir: ck\n"
                   "  restarts: 0\n  eval_tasks: 16\n  eval_seed: 9\n  test_seed: 11\n  test_tasks: 48\n"
                   "trainer_api: {token_file: t, lease_timeout: 2s}\n");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  const JobConfig::Training& t = all->training;
  EXPECT_EQ(t.steps, 5);
  EXPECT_DOUBLE_EQ(t.learning_rate, 0.001);
  EXPECT_DOUBLE_EQ(t.clip, 0.3);
  EXPECT_DOUBLE_EQ(t.kl, 0.05);
  EXPECT_DOUBLE_EQ(t.negative_weight, 0.5);
  EXPECT_DOUBLE_EQ(t.entropy_weight, -0.5);
  EXPECT_DOUBLE_EQ(t.grad_clip, 2);
  EXPECT_EQ(t.loss_agg, "dr_grpo");
  EXPECT_EQ(t.command, (std::vector<std::string>{"my-trainer", "--fast"}));
  EXPECT_EQ(t.checkpoint_dir, "ck");
  EXPECT_EQ(t.restarts, 0);
  EXPECT_EQ(t.eval_tasks, 16);
  EXPECT_EQ(t.eval_seed, 9);
  EXPECT_EQ(t.test_seed, 11);
  EXPECT_EQ(t.test_tasks, 48);
  EXPECT_FALSE(defaults->training.test_tasks.has_value()) << "unset: the held-out set has eval_tasks tasks";
  auto no_test_set = Parse(head + "training: {steps: 2, eval_tasks: 4, test_tasks: 8}\ntrainer_api: {token_file: t}\n");
  EXPECT_NE(no_test_set.status().message().find("training.test_tasks: sizes the held-out set, and there is none"),
            std::string::npos)
      << no_test_set.status().message();
  // Set seeds are packed into 31 bits (tasks/instance.h).
  for (const char* seed : {"tasks: {families: [arithmetic], seed: -1}\n", "tasks: {families: [arithmetic], seed: 2147483648}\n"}) {
    EXPECT_NE(Parse(head.substr(0, head.find("tasks:")) + seed).status().message().find("tasks.seed: value"), std::string::npos)
        << seed;
  }
  EXPECT_EQ(all->trainer_api.lease_timeout, std::chrono::seconds(2));

  auto algorithm = Parse(head + "training: {algorithm: ppo}\ntrainer_api: {token_file: t}\n");
  ASSERT_FALSE(algorithm.ok());
  EXPECT_NE(algorithm.status().message().find("j.yaml:6: training.algorithm: "), std::string::npos)
      << algorithm.status().message();
  auto lr = Parse(head + "training: {learning_rate: 2}\ntrainer_api: {token_file: t}\n");
  ASSERT_FALSE(lr.ok());
  EXPECT_NE(lr.status().message().find("training.learning_rate: "), std::string::npos) << lr.status().message();
  auto lease = Parse(head + "training: {steps: 1}\ntrainer_api: {token_file: t, lease_timeout: 1ms}\n");
  ASSERT_FALSE(lease.ok());
  EXPECT_NE(lease.status().message().find("trainer_api.lease_timeout: "), std::string::npos) << lease.status().message();
}

TEST(JobConfigTest, DistillationNeedsATeacher) {
  const std::string head = std::string(kHead) + "tasks: {families: [arithmetic]}\ntrainer_api: {token_file: t}\n";
  auto none = Parse(head + "training:\n  algorithm: distill\n");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().message().rfind("j.yaml:7: training.teacher: required when training.algorithm is distill", 0), 0u)
      << none.status().message();
  auto both = Parse(head + "training:\n  algorithm: distill\n  teacher: {model: models/default-moe, url: 'http://h:1'}\n");
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("training.teacher: required"), std::string::npos) << both.status().message();
  auto no_name = Parse(head + "training:\n  algorithm: distill\n  teacher: {url: 'http://127.0.0.1:9'}\n");
  ASSERT_FALSE(no_name.ok());
  EXPECT_NE(no_name.status().message().find("j.yaml:8: training.teacher.name: required with training.teacher.url"),
            std::string::npos)
      << no_name.status().message();
  auto missing = Parse(head + "training:\n  algorithm: distill\n  teacher:\n    model: models/no-such\n");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "j.yaml:9: training.teacher.model: no such file or directory: models/no-such");
  auto url = Parse(head + "training:\n  algorithm: distill\n  teacher: {url: 'http://127.0.0.1:9', name: big}\n");
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  EXPECT_EQ(url->training.teacher.url, "http://127.0.0.1:9");
  EXPECT_EQ(url->training.teacher.name, "big");
  auto served = Parse(head + "training:\n  algorithm: distill\n  teacher: {model: models/default-moe, threads: 2}\n");
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  EXPECT_EQ(served->training.teacher.model, "models/default-moe");
  EXPECT_EQ(served->training.teacher.threads, 2);
  auto grpo = Parse(head + "training: {steps: 1}\n");
  ASSERT_TRUE(grpo.ok()) << grpo.status().ToString();
  auto grpo_teacher = Parse(head + "training: {steps: 1, teacher: {model: models/default-moe}}\n");
  ASSERT_FALSE(grpo_teacher.ok());
  EXPECT_NE(grpo_teacher.status().message().find("training.teacher: only training.algorithm distill has a teacher"),
            std::string::npos)
      << grpo_teacher.status().message();
}

// The teacher's log-probs are compared with the student's token by token:
// a teacher with another tokenizer is refused, naming the key.
TEST(JobConfigTest, ATeacherWithAnotherTokenizerIsRefused) {
  const std::string dir = ::testing::TempDir() + "/other_tokenizer_teacher";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file("models/default-moe/config.json", dir + "/config.json",
                             std::filesystem::copy_options::overwrite_existing);
  std::ifstream in("models/default-moe/tokenizer.json");
  nlohmann::json tokenizer = nlohmann::json::parse(in);
  auto& vocab = tokenizer["model"]["vocab"];
  ASSERT_TRUE(vocab.is_object() && !vocab.empty());
  // Two tokens swap ids: the same size, another tokenizer.
  auto first = vocab.begin(), second = std::next(vocab.begin());
  const nlohmann::json id = first.value();
  first.value() = second.value();
  second.value() = id;
  std::ofstream(dir + "/tokenizer.json") << tokenizer.dump();
  const std::string head = std::string(kHead) + "tasks: {families: [arithmetic]}\ntrainer_api: {token_file: t}\n";
  auto other = Parse(head + "training:\n  algorithm: distill\n  teacher:\n    model: " + dir + "\n");
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().message().rfind("j.yaml:9: training.teacher.model: the teacher must share the student's "
                                           "tokenizer", 0), 0u)
      << other.status().message();
  EXPECT_NE(other.status().message().find(dir + "/tokenizer.json is not models/default/tokenizer.json"),
            std::string::npos)
      << other.status().message();
}

TEST(JobConfigTest, TheStaleTokenBoundIsOnByDefaultAndItsCapExceedsTheClip) {
  const std::string head = std::string(kHead) + "tasks: {families: [arithmetic]}\ntrainer_api: {token_file: t}\n";
  auto defaults = Parse(head + "training: {steps: 1}\n");
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_EQ(defaults->training.ratio_bound, "dual_clip");
  EXPECT_EQ(defaults->training.ratio_cap, 3.0);
  auto truncated = Parse(head + "training: {steps: 1, ratio_bound: truncated_is, ratio_cap: 1.1}\n");
  ASSERT_TRUE(truncated.ok()) << truncated.status().ToString();
  EXPECT_EQ(truncated->training.ratio_bound, "truncated_is");
  auto inside = Parse(head + "training: {steps: 1, clip: 0.5, ratio_cap: 1.4}\n");
  ASSERT_FALSE(inside.ok());
  EXPECT_NE(inside.status().message().find("training.ratio_cap: must exceed 1 + training.clip"), std::string::npos)
      << inside.status().message();
  auto unknown = Parse(head + "training: {steps: 1, ratio_bound: clamp}\n");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("training.ratio_bound"), std::string::npos) << unknown.status().message();
}

TEST(JobConfigTest, AResumedConfigMustBeTheStoredTreeNamingTheFirstKeyThatDiffers) {
  const std::string stored_yaml = "kind: rl_job\nname: j\nmodel: {path: models/default}\n"
                                  "tasks: {families: [arithmetic], count: 4}\ntraining: {steps: 4}\n";
  const ConfigFile stored = *ParseYaml(stored_yaml, "stored");
  // Layout and comments are not the config.
  const ConfigFile same = *ParseYaml("# a comment\nkind: rl_job\nname: j\nmodel:\n  path: models/default\n"
                                     "tasks:\n  families:\n    - arithmetic\n  count: 4\ntraining:\n  steps: 4\n",
                                     "same.yaml");
  EXPECT_TRUE(CheckSameJobConfig(same, stored, "j").ok());
  const ConfigFile steps = *ParseYaml("kind: rl_job\nname: j\nmodel: {path: models/default}\n"
                                      "tasks: {families: [arithmetic], count: 4}\ntraining: {steps: 20}\n",
                                      "c.yaml");
  EXPECT_EQ(CheckSameJobConfig(steps, stored, "j").message(),
            "c.yaml:5: training.steps: differs from the config job 'j' was started with (20 here, 4 there): "
            "resume without CONFIG to use the stored one, or start a new job");
  const ConfigFile family = *ParseYaml("kind: rl_job\nname: j\nmodel: {path: models/default}\n"
                                       "tasks: {families: [arithmetic, file_sum], count: 4}\ntraining: {steps: 4}\n",
                                       "c.yaml");
  EXPECT_NE(CheckSameJobConfig(family, stored, "j").message().find("tasks.families[1]: differs"), std::string::npos);
  const ConfigFile missing = *ParseYaml("kind: rl_job\nname: j\nmodel: {path: models/default}\n"
                                        "tasks: {families: [arithmetic]}\ntraining: {steps: 4}\n",
                                        "c.yaml");
  EXPECT_NE(CheckSameJobConfig(missing, stored, "j").message().find("tasks.count: differs from the config job 'j' "
                                                                    "was started with (absent here, 4 there)"),
            std::string::npos)
      << CheckSameJobConfig(missing, stored, "j").message();
}

TEST(JobConfigTest, TaskFilesAloneOrBesideFamilies) {
  const std::string good = ::testing::TempDir() + "/job_tasks.yaml";
  std::ofstream(good) << "tasks:\n  - {id: a, prompt: p, answer: 1}\n";
  const std::string bad = ::testing::TempDir() + "/job_bad_tasks.yaml";
  std::ofstream(bad) << "tasks:\n  - {id: a, prompt: p}\n";
  auto files = Parse(std::string(kHead) + "tasks: {files: [" + good + "]}\n");
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  EXPECT_EQ(files->tasks.files, (std::vector<std::string>{good}));
  EXPECT_TRUE(files->tasks.families.empty());
  auto both = Parse(std::string(kHead) + "tasks: {files: [" + good + "], families: [arithmetic]}\n");
  ASSERT_TRUE(both.ok()) << both.status().ToString();
  auto broken = Parse(std::string(kHead) + "tasks:\n  files: [" + good + ", " + bad + "]\n");
  ASSERT_FALSE(broken.ok());
  EXPECT_EQ(broken.status().message(),
            "j.yaml:5: tasks.files[1]: " + bad + ":2: tasks[0].answer: required by the exact verifier");
  const std::string rule = ::testing::TempDir() + "/job_rule_tasks.yaml";
  std::ofstream(rule) << "tasks:\n  - {id: r, prompt: p, answer: 1, environment: {net: policy, allow: [nowhere]}}\n";
  auto bad_rule = Parse(std::string(kHead) + "tasks: {files: [" + rule + "]}\n");
  ASSERT_FALSE(bad_rule.ok());
  EXPECT_EQ(bad_rule.status().message().rfind("j.yaml:4: tasks.files[0]: " + rule + ": task r: environment.allow[0]: ", 0), 0u)
      << bad_rule.status().message();
  auto none = Parse(std::string(kHead) + "tasks: {count: 3}\n");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().message(), "j.yaml:4: tasks: needs families (generated tasks) or files (task files), or both");
  auto eval = Parse(std::string(kHead) + "tasks: {files: [" + good + "]}\ntraining: {eval_tasks: 4}\ntrainer_api: {token_file: t}\n");
  ASSERT_FALSE(eval.ok());
  EXPECT_NE(eval.status().message().find("training.eval_tasks: the evaluation set is generated from tasks.families"),
            std::string::npos)
      << eval.status().message();
}

// sandbox.max: what a task file may ask; a task above it is refused when
// the config is read, naming the file, the task and the ceiling.
TEST(JobConfigTest, TaskFilesAskWithinTheJobsCeilings) {
  const std::string greedy = ::testing::TempDir() + "/job_greedy_tasks.yaml";
  std::ofstream(greedy) << "tasks:\n  - {id: g, prompt: p, answer: 1, environment: {pids: 1000000, cpus: 1024}}\n";
  auto refused = Parse(std::string(kHead) + "tasks: {files: [" + greedy + "]}\n");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(), "j.yaml:4: tasks.files[0]: " + greedy +
                                            ": task g: environment.pids: 1000000 is above the job's ceiling of 4096 "
                                            "(sandbox.max.pids)");
  auto raised = Parse(std::string(kHead) + "tasks: {files: [" + greedy + "]}\nsandbox: {max: {pids: 1000000, cpus: 1024}}\n");
  ASSERT_TRUE(raised.ok()) << raised.status().ToString();
  EXPECT_EQ(raised->sandbox.max.pids, 1'000'000);
  EXPECT_EQ(raised->sandbox.max.cpus, 1024);
  const std::string modest = ::testing::TempDir() + "/job_modest_tasks.yaml";
  std::ofstream(modest) << "tasks:\n  - {id: m, prompt: p, answer: 1, environment: {memory: 1G}}\n";
  auto lowered = Parse(std::string(kHead) + "tasks: {files: [" + modest + "]}\nsandbox: {max: {memory: 512M}}\n");
  ASSERT_FALSE(lowered.ok());
  EXPECT_NE(lowered.status().message().find("task m: environment.memory: 1G is above the job's ceiling of 512M"),
            std::string::npos)
      << lowered.status().message();
  // The job's own sandbox must be within its ceilings.
  auto own = Parse(std::string(kHead) + "tasks: {families: [arithmetic]}\nsandbox: {pids: 100, max: {pids: 50}}\n");
  ASSERT_FALSE(own.ok());
  EXPECT_EQ(own.status().message(), "j.yaml:5: sandbox.pids: is above sandbox.max.pids");
  auto bad_key = Parse(std::string(kHead) + "tasks: {families: [arithmetic]}\nsandbox: {max: {pid: 5}}\n");
  ASSERT_FALSE(bad_key.ok());
  EXPECT_NE(bad_key.status().message().find("sandbox.max.pid: unknown key"), std::string::npos) << bad_key.status().message();
}

TEST(JobConfigTest, SandboxUserIsReadAndChecked) {
  auto set = Parse(std::string(kHead) + "tasks: {families: [arithmetic]}\nsandbox: {user: 'nobody:nogroup'}\n");
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->sandbox.user, "nobody");
  EXPECT_EQ(set->sandbox.group, "nogroup");
  auto bad = Parse(std::string(kHead) + "tasks: {families: [arithmetic]}\nsandbox: {user: 'nobody:'}\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "j.yaml:5: sandbox.user: 'nobody:': expected USER[:GROUP] with a group after ':'");
}

TEST(JobConfigTest, AnExternalPolicyNeedsAModelAndNoTraining) {
  auto ok = Parse(std::string(kHead) + "tasks: {families: [arithmetic]}\npolicy: {url: 'http://127.0.0.1:9', model: m}\n");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->policy.url, "http://127.0.0.1:9");
  EXPECT_EQ(ok->policy.model, "m");
  auto no_model = Parse(std::string(kHead) + "tasks: {families: [arithmetic]}\npolicy: {url: 'http://127.0.0.1:9'}\n");
  ASSERT_FALSE(no_model.ok());
  EXPECT_NE(no_model.status().message().find("policy.model: missing required key"), std::string::npos)
      << no_model.status().message();
  auto training = Parse(std::string(kHead) + "tasks: {families: [arithmetic]}\npolicy: {url: 'http://127.0.0.1:9', model: m}\n"
                        "training: {steps: 1}\ntrainer_api: {token_file: t}\n");
  ASSERT_FALSE(training.ok());
  EXPECT_EQ(training.status().message().rfind("j.yaml:5: policy.url: training with an external policy is not built", 0), 0u)
      << training.status().message();
}

TEST(JobConfigTest, TruncatedOrPenalisedSamplingIsRefusedWithAReason) {
  for (const char* key : {"top_k: 40", "top_p: 0.9", "min_p: 0.05", "repetition_penalty: 1.1", "presence_penalty: 0.5",
                          "frequency_penalty: 0.5"}) {
    auto config = Parse(std::string(kHead) + "tasks: {families: [arithmetic]}\nrollout:\n  " + key + "\n");
    ASSERT_FALSE(config.ok()) << key;
    const std::string name = std::string(key).substr(0, std::string(key).find(':'));
    EXPECT_EQ(config.status().message().rfind("j.yaml:6: rollout." + name + ": RL sampling is raw", 0), 0u)
        << config.status().message();
  }
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
