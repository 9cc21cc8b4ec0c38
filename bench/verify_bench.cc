// The verify step's cost, per verification, through the real episode path
// (RunEpisode with a scripted agent of one tool call, a SandboxWorkspace on
// a real Manager): Episode::verify_ms from the answer to the verdict, which
// includes ending the agent's sandbox and copying its working directory
// into a fresh one (Workspace::ForVerification). Needs root.
//   build/bench/verify_bench --benchmark_repetitions=3
// Arguments: the task's kind — 0 exact over an answer file, 1 python check,
// 2 tests (python3 -m unittest); the working directory holds the 20 files
// of a small repository either way.
#include <unistd.h>

#include <benchmark/benchmark.h>

#include "rollout/episode.h"
#include "rollout/sandbox_workspace.h"
#include "rollout/scripted_policy.h"
#include "tasks/task.h"

namespace flashroll {
namespace {

Task BenchTask(int kind) {
  Task task;
  task.id = "bench-" + std::to_string(kind);
  task.prompt = "Write add(a, b) in solution.py and 5 to answer.";
  for (int i = 0; i < 20; ++i) {
    task.files.push_back({"pkg/module_" + std::to_string(i) + ".py", std::string(2000, '#') + "\n"});
  }
  task.answer = "5";
  task.answer_file = "answer";
  if (kind == 1) {
    task.check.kind = "python";
    task.check.script = "import sys\nsys.exit(0 if sys.stdin.read().strip() == '5' else 1)\n";
  } else if (kind == 2) {
    task.answer_file.clear();
    task.check.kind = "tests";
    task.check.test_command = "python3 -m unittest";
    task.check.fail_to_pass = {"test_solution"};
    task.check.files = {{"test_solution.py",
                         "import unittest\nfrom solution import add\n"
                         "class T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"}};
  }
  return task;
}

void BM_Verify(benchmark::State& state) {
  if (::geteuid() != 0) {
    state.SkipWithError("sandboxes need root");
    return;
  }
  auto tokenizer = engine::Tokenizer::FromHuggingFace("models/default/tokenizer.json", "models/default/tokenizer_config.json");
  auto manager = sandbox::Manager::Open();
  if (!tokenizer.ok() || !manager.ok()) {
    state.SkipWithError("tokenizer or manager");
    return;
  }
  const Task task = BenchTask(static_cast<int>(state.range(0)));
  const Scaffold& scaffold = *Scaffolds()[0];
  EpisodeOptions options;
  options.max_turns = 2;
  for (auto _ : state) {
    ScriptedPolicy policy(**tokenizer, {scaffold.RenderToolCall("Solve.", "printf 'def add(a, b):\\n    return a + b\\n' > solution.py; echo 5 > answer"),
                                        scaffold.RenderAnswer("Done.", "5")});
    auto workspace = SandboxWorkspace::Create(**manager, sandbox::SandboxSpec{});
    if (!workspace.ok()) {
      state.SkipWithError(workspace.status().ToString().c_str());
      return;
    }
    auto episode = RunEpisode(policy, **tokenizer, scaffold, task, **workspace, options);
    if (!episode.ok() || !episode->verdict.success) {
      state.SkipWithError(episode.ok() ? episode->verdict.reason.c_str() : episode.status().ToString().c_str());
      return;
    }
    state.SetIterationTime(static_cast<double>(episode->verify_ms) / 1000.0);
  }
}
BENCHMARK(BM_Verify)->Arg(0)->Arg(1)->Arg(2)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(20);

}  // namespace
}  // namespace flashroll

BENCHMARK_MAIN();
