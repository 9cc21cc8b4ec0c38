// Infrastructure failures kept apart (rollout/failure_kind.h), through the
// real episode path (RunEpisode, a scripted policy, a SandboxWorkspace on a
// real Manager): everything the agent's commands or artifacts trigger ends
// as its own outcome, with no failure kind, so the job rewards it; what no
// token of the policy's could have caused ends with its kind.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "rollout/episode.h"
#include "rollout/evaluation.h"
#include "rollout/failure_kind.h"
#include "rollout/sandbox_workspace.h"
#include "rollout/scaffold.h"
#include "rollout/scripted_policy.h"
#include "tasks/families/families.h"
#include "tasks/task.h"
#include "tests/rollout/rollout_fixtures.h"
#include "tests/slow_tests.h"

namespace flashroll {
namespace {

using std::chrono::milliseconds;

// A ScriptedPolicy that runs `before_turn(n)` before it serves turn n.
class HookedPolicy : public Policy {
 public:
  HookedPolicy(const engine::Tokenizer& tokenizer, std::vector<std::string> messages,
               std::function<void(int)> before_turn)
      : scripted_(tokenizer, std::move(messages)), before_turn_(std::move(before_turn)) {}
  int64_t max_model_len() const override { return scripted_.max_model_len(); }
  Result<bool> Generate(const PolicyRequest& request, const std::function<void(const PolicyToken&)>& on_token,
                        const std::function<bool()>& interrupted) override {
    before_turn_(turn_++);
    return scripted_.Generate(request, on_token, interrupted);
  }

 private:
  ScriptedPolicy scripted_;
  std::function<void(int)> before_turn_;
  int turn_ = 0;
};

class FailureKindsTest : public rollout_testing::WithDefaultTokenizer<rollout_testing::SandboxManagerTest> {
 protected:
  static const Scaffold& TheScaffold() { return *Scaffolds()[0]; }

  // The agent's turns: `commands` as tool calls, then the answer "41".
  static std::vector<std::string> Turns(const std::vector<std::string>& commands) {
    std::vector<std::string> messages;
    for (const std::string& c : commands) messages.push_back(TheScaffold().RenderToolCall("Run it.", c));
    messages.push_back(TheScaffold().RenderAnswer("Done.", "41"));
    return messages;
  }

  // A task answered in the final message (expected 42: "41" is wrong).
  static Task AnswerTask() {
    Task task;
    task.family = "arithmetic";
    task.id = "answer-1";
    task.prompt = "What is 6 * 7?";
    task.answer = "42";
    return task;
  }

  Result<Episode> Run(Policy& policy, const Task& task, const sandbox::SandboxSpec& spec, int turns,
                      milliseconds tool_timeout = milliseconds(10000), std::string* sandbox_id = nullptr) {
    auto workspace = SandboxWorkspace::Create(*manager_, spec);
    if (!workspace.ok()) return workspace.status();
    if (sandbox_id != nullptr) *sandbox_id = (*workspace)->id();
    EpisodeOptions options;
    options.max_turns = turns;
    options.tool_timeout = tool_timeout;
    return RunEpisode(policy, *tokenizer_, TheScaffold(), task, **workspace, options);
  }

  // The agent's own outcome: no failure kind, the episode ran to the answer
  // and was judged (a wrong answer: verdict false, a reward all the same).
  static void ExpectTheAgentsOutcome(const Result<Episode>& episode, const std::string& what) {
    ASSERT_TRUE(episode.ok()) << what << ": " << episode.status().ToString();
    EXPECT_FALSE(episode->failure_kind.has_value())
        << what << ": classified " << FailureKindName(*episode->failure_kind) << ": " << episode->failure;
    EXPECT_EQ(episode->stop_reason, "answer") << what;
    EXPECT_FALSE(episode->verdict.success) << what;
  }

  // Kills the init of sandbox `id` from outside and waits until the
  // manager no longer runs it.
  void KillInit(const std::string& id) {
    auto info = manager_->Info(id);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    ASSERT_EQ(::kill(info->init_pid, SIGKILL), 0);
    for (int i = 0; i < 200; ++i) {
      auto now = manager_->Info(id);
      if (!now.ok() || now->state != sandbox::State::kRunning) return;
      std::this_thread::sleep_for(milliseconds(10));
    }
    FAIL() << "sandbox " << id << " still running 2 s after its init was killed";
  }
};

TEST_F(FailureKindsTest, TheNamesAreDefinedOnceAndParseBack) {
  std::vector<std::string> names;
  for (FailureKind kind : kFailureKinds) {
    names.push_back(FailureKindName(kind));
    EXPECT_EQ(ParseFailureKind(names.back()), kind);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"sandbox_start", "sandbox_lost", "host_oom", "policy_unreachable",
                                             "harness_crash", "verifier_crash"}));
  EXPECT_EQ(ParseFailureKind("oom"), std::nullopt);
}

// OOM in its cgroup, the pids limit, a tool timeout and ENOSPC: each is the
// outcome of a command the agent chose, never an infrastructure failure.
TEST_F(FailureKindsTest, FailuresTheAgentsCommandsCauseAreItsOutcome) {
  struct Case {
    std::string what;
    std::string command;
    sandbox::SandboxSpec spec;
    milliseconds tool_timeout{10000};
  };
  std::vector<Case> cases;
  cases.push_back({"OOM in its cgroup", "python3 -c 'x = bytearray(1 << 30); print(len(x))'", {}});
  cases.back().spec.memory_bytes = 64ull << 20;
  cases.push_back({"the pids limit", "for i in $(seq 64); do sleep 3 & done; wait", {}});
  cases.back().spec.pids = 16;
  cases.push_back({"a tool timeout", "sleep 30", {}, milliseconds(300)});
  cases.push_back({"ENOSPC", "dd if=/dev/zero of=big bs=1M count=128", {}});
  cases.back().spec.disk_bytes = 16ull << 20;
  for (const Case& c : cases) {
    ScriptedPolicy policy(*tokenizer_, Turns({c.command}));
    const Result<Episode> episode = Run(policy, AnswerTask(), c.spec, 2, c.tool_timeout);
    ExpectTheAgentsOutcome(episode, c.what);
    if (!episode.ok() || episode->turns.empty()) continue;
    const ExecResult& result = episode->turns[0].tool_result;
    EXPECT_NE(result.exit_code, 0) << c.what << ": the command was meant to fail: " << result.stderr_text;
    if (c.what == "a tool timeout") {
      EXPECT_TRUE(result.timed_out);
    }
  }
}

// The check runs the agent's code: whatever that code does to the check
// (here it kills its own process with SIGSEGV; in the slow variant it never
// returns, so the check times out after 60 s) is the agent's outcome.
TEST_F(FailureKindsTest, ACheckThatTheAgentsCodeBreaksOrHoldsUpIsItsOutcome) {
  Task task;
  task.family = "file";
  task.id = "add-1";
  task.prompt = "Write add(a, b) in solution.py.";
  task.files = {{"solution.py", "def add(a, b):\n    raise NotImplementedError\n"}};
  task.check.kind = "tests";
  task.check.test_command = "python3 -m unittest";
  task.check.fail_to_pass = {"test_solution.AddTest.test_add"};
  task.check.files = {{"test_solution.py",
                       "import unittest\nfrom solution import add\n\n"
                       "class AddTest(unittest.TestCase):\n"
                       "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"}};
  const std::string body = testing_support::SlowTests() ? "    import time\\n    time.sleep(3600)\\n"
                                                        : "    import os, signal\\n    os.kill(os.getpid(), signal.SIGSEGV)\\n";
  ScriptedPolicy policy(*tokenizer_, Turns({"printf 'def add(a, b):\\n" + body + "' > solution.py"}));
  const Result<Episode> episode = Run(policy, task, {}, 2);
  ExpectTheAgentsOutcome(episode, "the agent's code in the check");
  if (episode.ok()) {
    EXPECT_NE(episode->verdict.reason.find(testing_support::SlowTests() ? "timed out" : "exit"), std::string::npos)
        << episode->verdict.reason;
  }
}

// The sandbox's init killed from outside while the agent's command runs:
// the command may have caused it, so it is the command's result.
TEST_F(FailureKindsTest, ASandboxThatDiesWhileTheAgentsCommandRunsIsItsOutcome) {
  std::string id;
  std::thread killer;
  HookedPolicy policy(*tokenizer_, Turns({"sleep 5"}), [&](int turn) {
    if (turn == 0) {
      killer = std::thread([&] {
        std::this_thread::sleep_for(milliseconds(500));  // the command is running by then
        KillInit(id);
      });
    }
  });
  const Result<Episode> episode = Run(policy, AnswerTask(), {}, 2, milliseconds(10000), &id);
  if (killer.joinable()) killer.join();
  ExpectTheAgentsOutcome(episode, "a sandbox killed during the command");
  if (episode.ok() && !episode->turns.empty()) {
    EXPECT_EQ(episode->turns[0].tool_result.exit_code, 137);
    EXPECT_NE(episode->turns[0].tool_result.stderr_text.find("the sandbox died while the command ran"),
              std::string::npos)
        << episode->turns[0].tool_result.stderr_text;
  }
}

// Its init killed while no command of the agent's runs (the policy is
// generating the next turn): the next command finds it gone, sandbox_lost.
TEST_F(FailureKindsTest, ASandboxLostWhileNoCommandRunsIsSandboxLost) {
  std::string id;
  HookedPolicy policy(*tokenizer_, Turns({"echo one", "echo two"}), [&](int turn) {
    if (turn == 1) KillInit(id);
  });
  const Result<Episode> episode = Run(policy, AnswerTask(), {}, 3, milliseconds(10000), &id);
  ASSERT_TRUE(episode.ok()) << episode.status().ToString();
  ASSERT_TRUE(episode->failure_kind.has_value()) << episode->stop_reason << ": " << episode->verdict.reason;
  EXPECT_EQ(*episode->failure_kind, FailureKind::kSandboxLost);
  EXPECT_EQ(episode->stop_reason, "infrastructure");
  EXPECT_NE(episode->failure.find("was gone before the command started"), std::string::npos) << episode->failure;
  EXPECT_EQ(episode->turns.size(), 2u);
}

// A policy endpoint that is down gives no turn: policy_unreachable.
TEST_F(FailureKindsTest, APolicyEndpointThatIsDownIsPolicyUnreachable) {
  auto policy = OpenAiPolicy({"http://127.0.0.1:1", "default", "", 4096});
  ASSERT_TRUE(policy.ok()) << policy.status().ToString();
  const Result<Episode> episode = Run(**policy, AnswerTask(), {}, 2);
  ASSERT_TRUE(episode.ok()) << episode.status().ToString();
  ASSERT_TRUE(episode->failure_kind.has_value()) << episode->stop_reason;
  EXPECT_EQ(*episode->failure_kind, FailureKind::kPolicyUnreachable);
  EXPECT_NE(episode->failure.find("http://127.0.0.1:1"), std::string::npos) << episode->failure;
}

// The harness cannot write the task's files (a path the workspace refuses),
// and the verifier cannot write its own: both before any token or artifact
// of the agent's mattered.
TEST_F(FailureKindsTest, AHarnessOrVerifierThatCannotSetUpIsItsOwnFailure) {
  Task harness = AnswerTask();
  harness.files = {{"../outside", "x"}};
  ScriptedPolicy first(*tokenizer_, Turns({}));
  const Result<Episode> broken = Run(first, harness, {}, 1);
  ASSERT_TRUE(broken.ok()) << broken.status().ToString();
  ASSERT_TRUE(broken->failure_kind.has_value());
  EXPECT_EQ(*broken->failure_kind, FailureKind::kHarnessCrash);
  EXPECT_TRUE(broken->turns.empty()) << "no turn was asked for";

  Task verifier = AnswerTask();
  verifier.check.kind = "python";
  verifier.check.script = "import sys; sys.exit(0)";
  verifier.check.files = {{"../outside.py", "x"}};
  ScriptedPolicy second(*tokenizer_, Turns({}));
  const Result<Episode> unchecked = Run(second, verifier, {}, 1);
  ASSERT_TRUE(unchecked.ok()) << unchecked.status().ToString();
  ASSERT_TRUE(unchecked->failure_kind.has_value()) << unchecked->verdict.reason;
  EXPECT_EQ(*unchecked->failure_kind, FailureKind::kVerifierCrash);
}

// Evaluation counts a sandbox that cannot be created as sandbox_start and
// leaves it out of every rate (the old evaluation failed as a whole).
TEST_F(FailureKindsTest, EvaluationCountsAnEnvironmentThatCannotStartApart) {
  ScriptedPolicy unused(*tokenizer_, {});
  EvalOptions options;
  options.families = {&families::Arithmetic()};
  options.scaffolds = {&TheScaffold()};
  options.efforts = {100};
  options.episodes_per_cell = 2;
  options.threads = 1;
  options.sandbox.image = sandbox::ImageKind::kDirectory;
  options.sandbox.image_dir = "/nonexistent/flashroll-image";
  auto report = Evaluate(unused, *tokenizer_, *manager_, options, nullptr);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->failure_kinds, (std::map<std::string, int>{{"sandbox_start", 2}}));
  EXPECT_EQ(report->total.episodes, 0);
  EXPECT_TRUE(report->episodes.empty());
  EXPECT_EQ(report->ToJson()["failure_kinds"]["sandbox_start"], 2);
}

}  // namespace
}  // namespace flashroll
