#include "rollout/commands.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "common/flags.h"
#include "common/progress.h"
#include "common/thread_pool.h"
#include "rollout/demonstrations.h"
#include "tasks/rng.h"

namespace flashroll {
namespace {

std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

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
  if (count < 1) return ReportFailure(Status::InvalidArgument("--count: must be at least 1"));
  if (threads < 1 || threads > 256) return ReportFailure(Status::InvalidArgument("--threads: must be in [1, 256]"));
  if (min_effort < 1 || max_effort > 100 || min_effort > max_effort) {
    return ReportFailure(Status::InvalidArgument("--min-effort/--max-effort: need 1 <= min <= max <= 100"));
  }

  std::vector<const TaskFamily*> families;
  for (const std::string& name : families_arg.empty() ? std::vector<std::string>{} : SplitCommas(families_arg)) {
    const TaskFamily* family = FindTaskFamily(name);
    if (family == nullptr) return ReportFailure(Status::InvalidArgument("--families: unknown family '" + name + "'"));
    families.push_back(family);
  }
  if (families.empty()) families = TaskFamilies();
  std::vector<const Scaffold*> scaffolds;
  for (const std::string& name : scaffolds_arg.empty() ? std::vector<std::string>{} : SplitCommas(scaffolds_arg)) {
    const Scaffold* scaffold = FindScaffold(name);
    if (scaffold == nullptr) return ReportFailure(Status::InvalidArgument("--scaffolds: unknown scaffold '" + name + "'"));
    scaffolds.push_back(scaffold);
  }
  if (scaffolds.empty()) scaffolds = Scaffolds();

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
      const uint64_t item_seed = static_cast<uint64_t>(seed) * 1'000'003ull + i;
      TaskRng rng(item_seed);
      const TaskFamily& family = *families[i % families.size()];
      const Scaffold& scaffold = *scaffolds[(i / families.size()) % scaffolds.size()];
      const int difficulty = static_cast<int>(rng.Int(1, 5));
      const int effort = static_cast<int>(rng.Int(min_effort, max_effort));
      auto demo = SynthesizeDemonstration(family, family.Generate(item_seed, difficulty), scaffold, effort, item_seed);
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

}  // namespace

void RegisterRolloutCommands(Registry& registry) {
  registry.AddCommand({"rollout demos", "synthesise demonstration trajectories (JSONL) from task families", RunDemos});
}

}  // namespace flashroll
