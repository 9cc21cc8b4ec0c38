// The evaluation compares like with like (issue 22, item 4): every effort
// runs the same tasks, and episodes get the budget the options give (a job
// passes its own rollout.max_tokens). Driven through Evaluate with real
// sandboxes and a policy that records what it was asked.
#include <unistd.h>

#include <map>
#include <mutex>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "engine/tokenizer/tokenizer.h"
#include "rollout/evaluation.h"
#include "rollout/policy.h"
#include "rollout/scaffold.h"
#include "sandbox/sandbox.h"
#include "tasks/task.h"
#include "tests/rollout/rollout_fixtures.h"

namespace flashroll {
namespace {

// Answers every turn wrongly at once, recording each request's prompt and
// token budget.
class RecordingPolicy : public Policy {
 public:
  explicit RecordingPolicy(const engine::Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  int64_t max_model_len() const override { return 4096; }
  Result<bool> Generate(const PolicyRequest& request, const std::function<void(const PolicyToken&)>& on_token,
                        const std::function<bool()>&) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      prompts_.push_back(tokenizer_.Decode(request.prompt));
      budgets_.push_back(static_cast<int64_t>(request.prompt.size()) + request.max_tokens);
    }
    for (int32_t id : tokenizer_.Encode("<think>\nno\n</think>\n<answer>wrong</answer>", false)) on_token({id, 0.0f, 0});
    on_token({tokenizer_.TokenId("<|im_end|>"), 0.0f, 0});
    return false;
  }
  std::vector<std::string> prompts() const {
    std::lock_guard<std::mutex> lock(mu_);
    return prompts_;
  }
  std::vector<int64_t> budgets() const {
    std::lock_guard<std::mutex> lock(mu_);
    return budgets_;
  }

 private:
  const engine::Tokenizer& tokenizer_;
  mutable std::mutex mu_;
  std::vector<std::string> prompts_;
  std::vector<int64_t> budgets_;
};

using EvaluationTasksTest = rollout_testing::WithDefaultTokenizer<rollout_testing::SandboxManagerTest>;

// The text between `open` and the next `close`.
std::string Between(const std::string& text, const std::string& open, const std::string& close) {
  const size_t begin = text.find(open);
  if (begin == std::string::npos) return "";
  const size_t end = text.find(close, begin + open.size());
  return text.substr(begin + open.size(), end - begin - open.size());
}

TEST_F(EvaluationTasksTest, EveryEffortRunsTheSameTasksWithinTheBudget) {
  RecordingPolicy policy(*tokenizer_);
  EvalOptions options;
  options.families = {FindTaskFamily("arithmetic"), FindTaskFamily("find_line")};
  options.scaffolds = {Scaffolds()[0]};
  options.efforts = {1, 50, 100};
  options.episodes_per_cell = 4;
  options.max_turns = 1;
  options.max_tokens = 1024;
  options.threads = 2;
  auto report = Evaluate(policy, *tokenizer_, *manager_, options, nullptr);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_EQ(report->total.episodes, 12);
  std::map<std::string, std::multiset<std::string>> tasks_by_effort;
  for (const std::string& prompt : policy.prompts()) {
    tasks_by_effort[Between(prompt, "Reasoning Effort: ", "<|im_end|>")].insert(
        Between(prompt, "<|im_start|>user\n", "<|im_end|>"));
  }
  ASSERT_EQ(tasks_by_effort.size(), 3u);
  EXPECT_EQ(tasks_by_effort["1"].size(), 4u);
  EXPECT_EQ(tasks_by_effort["1"], tasks_by_effort["50"]) << "effort would be confounded with the tasks";
  EXPECT_EQ(tasks_by_effort["1"], tasks_by_effort["100"]);
  for (int64_t budget : policy.budgets()) EXPECT_EQ(budget, 1024);
}

}  // namespace
}  // namespace flashroll
