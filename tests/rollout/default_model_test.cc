// The shipped default model, run as an agent in real sandboxes on fresh tasks
// of the demonstrated difficulties at temperature 0.7 with a fixed seed,
// writes well-formed tool calls.
#include <unistd.h>

#include <gtest/gtest.h>

#include "../cli/run_flashroll.h"
#include "engine/models/model_tokenizer.h"
#include "rollout/evaluation.h"
#include "rollout/scaffold.h"
#include "tasks/task.h"

namespace flashroll {
namespace {

TEST(DefaultModelTest, ToolCallFormatIsValidInEveryScaffold) {
  if (::geteuid() != 0) GTEST_SKIP() << "sandboxes need root";
  auto manager = sandbox::Manager::Open();
  if (!manager.ok()) GTEST_SKIP() << manager.status().ToString();
  auto model = engine::Model::Load("models/default");
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto tokenizer = engine::LoadModelTokenizer(**model);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();

  EvalOptions options;
  options.families = TaskFamilies();
  options.scaffolds = Scaffolds();
  options.efforts = {50};
  options.episodes_per_cell = 4;
  options.max_difficulty = kDemonstrationMaxDifficulty;
  options.temperature = 0.7;
  options.seed = 77;
  options.sandbox.memory_bytes = uint64_t{512} << 20;
  options.sandbox.pids = 128;
  auto engine = engine::Engine::Start(**model, tokenizer->get(), engine::EngineOptions());
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  const std::unique_ptr<Policy> policy = EnginePolicy(**engine);
  auto report = Evaluate(*policy, **tokenizer, **manager, options, nullptr);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  for (const Scaffold* scaffold : Scaffolds()) {
    const EvalCounts& counts = report->by_scaffold[scaffold->name()];
    ASSERT_EQ(counts.episodes, 4) << scaffold->name();
    // 90% on this small sample; the full measurement (models/README.md) is
    // at least 96.6% in every scaffold.
    EXPECT_GE(counts.valid_turns * 10, counts.turns * 9) << scaffold->name() << "\n" << report->ToText();
  }
  // At least one episode in the sample solves its task: the model is not
  // just producing well-formed noise.
  EXPECT_GT(report->total.successes, 0) << report->ToText();
  // Every episode is listed once, by index, agreeing with the counts.
  const nlohmann::json episodes = report->ToJson()["episodes"];
  ASSERT_EQ(episodes.size(), static_cast<size_t>(report->total.episodes));
  int successes = 0;
  for (size_t i = 0; i < episodes.size(); ++i) {
    EXPECT_EQ(episodes[i]["index"], i);
    successes += episodes[i]["success"].get<bool>() ? 1 : 0;
  }
  EXPECT_EQ(successes, report->total.successes);
}

std::string ShellQuoted(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// The user-facing path: `flashroll generate --prompt` on a sample task's
// ChatML prompt gives a first turn that parses as a tool call in every
// scaffold (greedy, so the same text every run).
TEST(DefaultModelTest, GenerateWritesAToolCallForASampleTask) {
  const Task task = FindTaskFamily("inventory")->Generate(5, 2);
  for (const Scaffold* scaffold : Scaffolds()) {
    const std::string prompt = "<|im_start|>system\n" + scaffold->SystemPrompt(50) + "<|im_end|>\n<|im_start|>user\n" +
                               task.prompt + "<|im_end|>\n<|im_start|>assistant\n";
    const auto run = testing::RunFlashroll("generate --model models/default --max-tokens 300 --prompt " +
                                           ShellQuoted(prompt));
    ASSERT_EQ(run.exit_code, 0) << run.output;
    auto turn = scaffold->Parse(run.output);
    ASSERT_TRUE(turn.ok()) << scaffold->name() << ": " << turn.status().ToString() << "\n" << run.output;
    EXPECT_FALSE(turn->has_answer) << scaffold->name() << ": answered before looking\n" << run.output;
    EXPECT_NE(turn->command.find(task.files.at(0).path), std::string::npos)
        << scaffold->name() << ": the command should read the task's file\n" << run.output;
  }
}

}  // namespace
}  // namespace flashroll
