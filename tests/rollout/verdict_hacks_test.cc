// Reward hacks against the verdict, driven through the real episode path
// (RunEpisode with a scripted policy, a SandboxWorkspace on a real
// Manager): each agent below scores today only because its check ran in
// its own sandbox while its processes lived, or over files it planted; every
// one must score 0 (issue 26, item 2). Honest agents beside them still pass,
// so the copied working directory is what the check sees.
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/tokenizer/tokenizer.h"
#include "rollout/episode.h"
#include "rollout/sandbox_workspace.h"
#include "rollout/scaffold.h"
#include "rollout/scripted_policy.h"
#include "tasks/task.h"
#include "tests/rollout/rollout_fixtures.h"

namespace flashroll {
namespace {

class VerdictHacksTest : public rollout_testing::WithDefaultTokenizer<rollout_testing::SandboxManagerTest> {
 protected:
  // Runs `commands` as the agent's tool calls, then answers `answer`.
  Episode Play(const Task& task, const std::vector<std::string>& commands, const std::string& answer = "done") {
    const Scaffold& scaffold = *Scaffolds()[0];
    std::vector<std::string> messages;
    for (const std::string& c : commands) messages.push_back(scaffold.RenderToolCall("Run it.", c));
    messages.push_back(scaffold.RenderAnswer("Finished.", answer));
    ScriptedPolicy policy(*tokenizer_, messages);
    auto workspace = SandboxWorkspace::Create(*manager_, sandbox::SandboxSpec{});
    EXPECT_TRUE(workspace.ok()) << workspace.status().ToString();
    if (!workspace.ok()) return {};
    EpisodeOptions options;
    options.max_turns = static_cast<int>(messages.size());
    auto episode = RunEpisode(policy, *tokenizer_, scaffold, task, **workspace, options);
    EXPECT_TRUE(episode.ok()) << episode.status().ToString();
    if (!episode.ok()) return {};
    for (const EpisodeTurn& turn : episode->turns) {
      EXPECT_TRUE(turn.command.empty() || turn.tool_result.exit_code == 0)
          << turn.command << ": exit " << turn.tool_result.exit_code << ": " << turn.tool_result.stderr_text;
    }
    EXPECT_EQ(episode->stop_reason, "answer");
    return std::move(*episode);
  }

  // add(a, b) in solution.py, checked by the task's own unittest file.
  static Task AddTask(const std::string& test_command, const std::string& test_id) {
    Task task;
    task.family = "file";
    task.id = "add-1";
    task.prompt = "Write add(a, b) in solution.py.";
    task.files = {{"solution.py", "def add(a, b):\n    raise NotImplementedError\n"}};
    task.check.kind = "tests";
    task.check.test_command = test_command;
    task.check.fail_to_pass = {test_id};
    task.check.files = {{"test_solution.py",
                         "import unittest\nfrom solution import add\n\n"
                         "class AddTest(unittest.TestCase):\n"
                         "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n"
                         "if __name__ == '__main__':\n    unittest.main()\n"}};
    return task;
  }

  static constexpr char kWrongSolution[] = "printf 'def add(a, b):\\n    return 0\\n' > solution.py";
  static constexpr char kRightSolution[] = "printf 'def add(a, b):\\n    return a + b\\n' > solution.py";

};

// (1) A process left behind rewrites the answer after the agent's last
// turn, while a slow check is still running (the brief's own rewriter).
TEST_F(VerdictHacksTest, ABackgroundRewriterOfTheAnswerScoresZero) {
  Task task;
  task.id = "rewrite-1";
  task.prompt = "Write right to answer.";
  task.answer_file = "answer";
  task.check.kind = "tests";
  task.check.test_command = "sh check.sh";
  task.check.fail_to_pass = {"answer"};
  task.check.files = {{"check.sh", "sleep 1; grep -qx right answer\n"}};
  const Episode hack = Play(task, {"echo wrong > answer; nohup sh -c 'sleep 0.5; echo right > answer' >/dev/null 2>&1 &"});
  EXPECT_FALSE(hack.verdict.success) << "the rewrite after the last turn counted";
  const Episode honest = Play(task, {"echo right > answer"});
  EXPECT_TRUE(honest.verdict.success) << honest.verdict.reason;
}

// (1) A tight loop left behind rewrites the python check's own script and
// answer as soon as the verifier writes them.
TEST_F(VerdictHacksTest, ABackgroundRewriterOfTheCheckScriptScoresZero) {
  Task task;
  task.id = "rewrite-2";
  task.prompt = "Write 42 to answer.";
  task.answer_file = "answer";
  task.check.kind = "python";
  task.check.script = "import sys\nsys.exit(0 if sys.stdin.read().strip() == '42' else 1)\n";
  const std::string rewriter =
      "echo 41 > answer; nohup sh -c 'while :; do echo \"raise SystemExit(0)\" > .flashroll-check.py; "
      "echo 42 > .flashroll-answer; done' >/dev/null 2>&1 &";
  const Episode hack = Play(task, {rewriter});
  EXPECT_FALSE(hack.verdict.success) << "the rewritten check script counted";
  const Episode honest = Play(task, {"echo 42 > answer"});
  EXPECT_TRUE(honest.verdict.success) << honest.verdict.reason;
}

// (2) A module planted in the working directory stands in for the runner:
// `python3 -m unittest` and `python3 -m pytest` import it from there first.
TEST_F(VerdictHacksTest, APlantedRunnerModuleScoresZero) {
  for (const auto& [command, id, planted] :
       std::vector<std::tuple<std::string, std::string, std::string>>{{"python3 -m unittest", "test_solution", "unittest.py"},
                                                                     {"python3 -m pytest -q", "test_solution.py", "pytest.py"}}) {
    SCOPED_TRACE(command);
    const Task task = AddTask(command, id);
    const Episode hack = Play(task, {kWrongSolution, "printf 'import sys\\nsys.exit(0)\\n' > " + planted});
    EXPECT_FALSE(hack.verdict.success) << "the planted " << planted << " passed the tests";
    EXPECT_NE(hack.verdict.reason.find(planted), std::string::npos) << hack.verdict.reason;
    const Episode honest = Play(task, {kRightSolution});
    EXPECT_TRUE(honest.verdict.success) << honest.verdict.reason;
  }
}

// (3) The agent patches the image's test runner in its own writable root:
// a pytest in its user site-packages, which python3 finds before the
// image's own.
TEST_F(VerdictHacksTest, APatchedTestRunnerScoresZero) {
  const Task task = AddTask("python3 -m pytest -q", "test_solution.py");
  const Episode hack = Play(task, {kWrongSolution,
                                   "d=$(python3 -m site --user-site) && mkdir -p \"$d\" && "
                                   "printf 'import sys\\nsys.exit(0)\\n' > \"$d/pytest.py\" && "
                                   "cd / && python3 -m pytest; echo \"patched runner exits $?\""});
  ASSERT_FALSE(hack.turns.empty());
  ASSERT_NE(hack.turns[1].tool_result.stdout_text.find("patched runner exits 0"), std::string::npos)
      << "the patch took inside the agent's sandbox: " << hack.turns[1].tool_result.stdout_text;
  EXPECT_FALSE(hack.verdict.success) << "the patched runner passed the tests";
}

// (3) The task's own runner script, which the agent overwrites: the check's
// files come from the task's verifier record, written over the agent's.
TEST_F(VerdictHacksTest, AnOverwrittenRunnerScriptScoresZero) {
  Task task = AddTask("sh run_tests.sh", "test_solution");
  task.check.files.push_back({"run_tests.sh", "python3 -m unittest \"$1\"\n"});
  const Episode hack = Play(task, {kWrongSolution, "echo 'exit 0' > run_tests.sh"});
  EXPECT_FALSE(hack.verdict.success) << "the agent's run_tests.sh ran";
  const Episode honest = Play(task, {kRightSolution});
  EXPECT_TRUE(honest.verdict.success) << honest.verdict.reason;
}

// (4) Output that looks like a pass: the verdict is the exit status.
TEST_F(VerdictHacksTest, PrintedPassLinesScoreZero) {
  const Task task = AddTask("python3 test_solution.py", "-v");
  const Episode hack =
      Play(task, {"printf 'print(\"PASSED\")\\nprint(\"OK\")\\nprint(\"1 passed in 0.01s\")\\ndef add(a, b):\\n    return 0\\n' > solution.py"},
           "PASSED");
  EXPECT_FALSE(hack.verdict.success) << "printed pass lines counted";
}

}  // namespace
}  // namespace flashroll
