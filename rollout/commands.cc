#include "rollout/commands.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>

#include "common/flags.h"
#include "common/progress.h"
#include "common/reasoning_effort.h"
#include "common/strings.h"
#include "common/thread_pool.h"
#include "engine/models/model_tokenizer.h"
#include "rollout/demonstrations.h"
#include "rollout/evaluation.h"
#include "tasks/instance.h"
#include "tasks/rng.h"

namespace flashroll {
namespace {

int RunDemos(const std::vector<std::string>& args) {
  int64_t count = 100, seed = 1, threads = 2, min_effort = 1, max_effort = 100;
  std::string out_path, families_arg, scaffolds_arg;
  FlagParser flags("flashroll rollout demos --out FILE [flags]",
                   "Synthesises demonstration trajectories: each task's reference solution runs for "
                   "real in a scratch directory and is written as a conversation in a scaffold's "
                   "format, one JSON object per line. Families, scaffolds, difficulties (1-5) and "
                   "efforts are drawn in turn from the seed.");
  flags.String("--out", &out_path, "output JSONL file (written atomically)");
  flags.Int("--count", &count, "number of trajectories (default 100)");
  flags.Int("--seed", &seed, "seed (default 1)");
  flags.String("--families", &families_arg, "comma-separated task families (default: all)");
  flags.String("--scaffolds", &scaffolds_arg, "comma-separated scaffolds (default: all)");
  flags.Int("--min-effort", &min_effort, "lowest reasoning effort b (default 1)");
  flags.Int("--max-effort", &max_effort, "highest reasoning effort b (default 100)");
  flags.Int("--threads", &threads, "worker threads (default 2)");
  if (auto exit = flags.ParseOrExit(args)) return *exit;
  if (out_path.empty()) return ReportFailure(Status::InvalidArgument("--out: required"));
  if (count < 1 || count > tasks::kMaxSetIndex + 1) {
    return ReportFailure(Status::InvalidArgument("--count: must be in [1, 2^31]"));
  }
  if (seed < 0 || seed > tasks::kMaxSetSeed) {
    return ReportFailure(Status::InvalidArgument("--seed: must be in [0, 2^31 - 1]"));
  }
  if (threads < 1 || threads > 256) return ReportFailure(Status::InvalidArgument("--threads: must be in [1, 256]"));
  if (min_effort < 1 || max_effort > 100 || min_effort > max_effort) {
    return ReportFailure(Status::InvalidArgument("--min-effort/--max-effort: need 1 <= min <= max <= 100"));
  }

  std::vector<const TaskFamily*> families;
  for (const std::string& name : SplitNonEmpty(families_arg, ',')) {
    const TaskFamily* family = FindTaskFamily(name);
    if (family == nullptr) return ReportFailure(Status::InvalidArgument("--families: unknown family '" + name + "'"));
    families.push_back(family);
  }
  if (families.empty()) families = TaskFamilies();
  std::vector<const Scaffold*> scaffolds;
  for (const std::string& name : SplitNonEmpty(scaffolds_arg, ',')) {
    const Scaffold* scaffold = FindScaffold(name);
    if (scaffold == nullptr) return ReportFailure(Status::InvalidArgument("--scaffolds: unknown scaffold '" + name + "'"));
    scaffolds.push_back(scaffold);
  }
  if (scaffolds.empty()) scaffolds = Scaffolds();

  const tasks::InstanceSet set{families, 1, kDemonstrationMaxDifficulty};
  const size_t n = static_cast<size_t>(count);
  std::vector<std::string> lines(n);
  std::vector<Status> failures(n);
  std::vector<int> successes(n, 0);
  ProgressOptions progress_options;
  progress_options.unit = "trajectories";
  Progress progress("demos", n, progress_options);
  ThreadPool pool(static_cast<size_t>(threads));
  pool.ParallelFor(n, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      const tasks::TaskInstance instance =
          tasks::Instance(tasks::Purpose::kDemonstrations, seed, static_cast<int64_t>(i), set);
      const Scaffold& scaffold = *scaffolds[(i / families.size()) % scaffolds.size()];
      TaskRng rng(instance.seed ^ 0xEFF0127ull);  // a stream apart from the family's own draws
      const int effort = static_cast<int>(rng.Int(min_effort, max_effort));
      auto demo = SynthesizeDemonstration(*FindTaskFamily(instance.task.family), instance.task, scaffold, effort,
                                          instance.seed);
      if (!demo.ok()) {
        failures[i] = demo.status();
      } else {
        lines[i] = DemonstrationToJson(*demo).dump();
        successes[i] = demo->success ? 1 : 0;
      }
      progress.Advance();
    }
  });
  progress.Finish();
  for (const Status& failure : failures) {
    if (!failure.ok()) return ReportFailure(failure.Wrap("rollout demos"));
  }

  const std::string temp = out_path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    for (const std::string& line : lines) out << line << '\n';
    out.close();
    if (!out) {
      std::remove(temp.c_str());
      return ReportFailure(Status::IoError("write " + temp));
    }
  }
  if (std::rename(temp.c_str(), out_path.c_str()) != 0) {
    std::remove(temp.c_str());
    return ReportFailure(Status::FromErrno(errno, "rename " + temp + " to " + out_path));
  }
  int solved = 0;
  for (int s : successes) solved += s;
  std::printf("wrote %zu trajectories to %s (%d verified successful)\n", n, out_path.c_str(), solved);
  return 0;
}

int RunEval(const std::vector<std::string>& args) {
  std::string model_path, families_arg, scaffolds_arg, efforts_arg = "1,50,100", image = "host";
  int64_t per_cell = 4, seed = 1000, threads = 2, max_turns = 8, min_difficulty = 1,
          max_difficulty = kMaxDifficulty, max_tokens = EpisodeOptions().max_tokens;
  double temperature = 0.7;
  bool json = false, unenforced = false;
  FlagParser flags("flashroll eval --model PATH [flags]",
                   "Runs the model as an agent on fresh task instances in every scaffold and at every "
                   "effort, each episode in its own sandbox, and reports tool-call format validity, "
                   "task success and reasoning length.");
  flags.String("--model", &model_path, "Hugging Face model directory or GGUF file");
  flags.String("--families", &families_arg, "comma-separated task families (default: all)");
  flags.String("--scaffolds", &scaffolds_arg, "comma-separated scaffolds (default: all)");
  flags.String("--efforts", &efforts_arg, "comma-separated reasoning efforts b: low (50), high (75), max (100) or 1-100 (default 1,50,100)");
  flags.Int("--episodes", &per_cell, "episodes per (scaffold, effort) (default 4)");
  flags.Double("--temperature", &temperature, "sampling temperature (default 0.7)");
  flags.Int("--seed", &seed, "seed of the evaluation set: its task instances and sampling (default 1000)");
  flags.Int("--max-turns", &max_turns, "assistant turns per episode at most (default 8)");
  flags.Int("--max-tokens", &max_tokens, "tokens per episode at most, prompt included (default 3072)");
  flags.Int("--min-difficulty", &min_difficulty, "lowest task difficulty (default 1)");
  flags.Int("--max-difficulty", &max_difficulty, "highest task difficulty (default 10)");
  flags.Int("--threads", &threads, "episodes run at once (default 2)");
  flags.String("--image", &image, "sandbox image: host, busybox or a directory (default host)");
  flags.Bool("--json", &json, "print the report as JSON");
  flags.Bool("--allow-unenforced-limits", &unenforced,
             "without root (no cgroups), run the episodes without their 512M memory and 128 pids limits");
  if (auto exit = flags.ParseOrExit(args)) return *exit;
  if (model_path.empty()) return ReportFailure(Status::InvalidArgument("--model: required"));
  if (per_cell < 1 || threads < 1 || max_turns < 1 || max_tokens < 1) {
    return ReportFailure(Status::InvalidArgument("--episodes, --threads, --max-turns and --max-tokens must be at least 1"));
  }
  if (seed < 0 || seed > tasks::kMaxSetSeed) {
    return ReportFailure(Status::InvalidArgument("--seed: must be in [0, 2^31 - 1]"));
  }

  EvalOptions options;
  for (const std::string& name : SplitNonEmpty(families_arg, ',')) {
    const TaskFamily* family = FindTaskFamily(name);
    if (family == nullptr) return ReportFailure(Status::InvalidArgument("--families: unknown family '" + name + "'"));
    options.families.push_back(family);
  }
  if (options.families.empty()) options.families = TaskFamilies();
  for (const std::string& name : SplitNonEmpty(scaffolds_arg, ',')) {
    const Scaffold* scaffold = FindScaffold(name);
    if (scaffold == nullptr) return ReportFailure(Status::InvalidArgument("--scaffolds: unknown scaffold '" + name + "'"));
    options.scaffolds.push_back(scaffold);
  }
  if (options.scaffolds.empty()) options.scaffolds = Scaffolds();
  options.efforts.clear();
  for (const std::string& text : SplitNonEmpty(efforts_arg, ',')) {
    Result<int> effort = ParseReasoningEffort(text);
    if (!effort.ok()) return ReportFailure(effort.status().Wrap("--efforts"));
    options.efforts.push_back(*effort);
  }
  if (options.efforts.empty()) return ReportFailure(Status::InvalidArgument("--efforts: empty"));
  if (min_difficulty < 1 || max_difficulty > kMaxDifficulty || min_difficulty > max_difficulty) {
    return ReportFailure(Status::InvalidArgument("--min-difficulty/--max-difficulty: need 1 <= min <= max <= " +
                                                 std::to_string(kMaxDifficulty)));
  }
  options.min_difficulty = static_cast<int>(min_difficulty);
  options.max_difficulty = static_cast<int>(max_difficulty);
  options.episodes_per_cell = static_cast<int>(per_cell);
  options.temperature = temperature;
  options.seed = seed;
  options.max_tokens = max_tokens;
  options.threads = static_cast<int>(threads);
  options.max_turns = static_cast<int>(max_turns);
  if (Status s = sandbox::ParseImage(image, &options.sandbox); !s.ok()) return ReportFailure(s.Wrap("--image"));
  options.sandbox.memory_bytes = uint64_t{512} << 20;
  options.sandbox.pids = 128;

  auto model = engine::Model::Load(model_path);
  if (!model.ok()) return ReportFailure(model.status());
  auto tokenizer = engine::LoadModelTokenizer(**model);
  if (!tokenizer.ok()) return ReportFailure(tokenizer.status());
  sandbox::Manager::Options manager_options;
  manager_options.allow_unenforced_limits = unenforced;
  auto manager = sandbox::Manager::Open(manager_options);
  if (!manager.ok()) return ReportFailure(manager.status().Wrap("eval needs sandboxes"));
  engine::EngineOptions engine_options;
  engine_options.max_running = std::max<int64_t>(threads, 1);
  auto engine = engine::Engine::Start(**model, tokenizer->get(), engine_options);
  if (!engine.ok()) return ReportFailure(engine.status());

  ProgressOptions progress_options;
  progress_options.unit = "episodes";
  Progress progress("eval", options.scaffolds.size() * options.efforts.size() * static_cast<size_t>(per_cell),
                    progress_options);
  const std::unique_ptr<Policy> policy = EnginePolicy(**engine);
  auto report = Evaluate(*policy, **tokenizer, **manager, options, &progress);
  progress.Finish();
  if (!report.ok()) return ReportFailure(report.status());
  if (json) {
    std::printf("%s\n", report->ToJson().dump(2).c_str());
  } else {
    std::fputs(report->ToText().c_str(), stdout);
    for (const std::string& failure : report->failures) std::printf("  failed: %s\n", failure.c_str());
  }
  return 0;
}

}  // namespace

void RegisterRolloutCommands(Registry& registry) {
  registry.AddCommand({"rollout demos", "synthesise demonstration trajectories (JSONL) from task families", RunDemos});
  registry.AddCommand({"eval", "evaluate a model as an agent across scaffolds and efforts, in sandboxes", RunEval});
}

}  // namespace flashroll
