#include "rollout/evaluation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>

#include "common/thread_pool.h"
#include "rollout/sandbox_workspace.h"

namespace flashroll {
namespace {

void Add(EvalCounts& counts, const Episode& episode) {
  counts.episodes += 1;
  counts.successes += episode.verdict.success ? 1 : 0;
  for (const EpisodeTurn& turn : episode.turns) {
    counts.turns += 1;
    counts.valid_turns += turn.format_valid ? 1 : 0;
  }
  const int64_t reasoning = episode.reasoning_tokens();
  counts.reasoning_tokens += reasoning;
  counts.reasoning_tokens_sq += static_cast<double>(reasoning) * static_cast<double>(reasoning);
}

// The sample standard deviation of the episodes' reasoning tokens.
double ReasoningSd(const EvalCounts& c) {
  if (c.episodes < 2) return 0.0;
  const double n = c.episodes, mean = static_cast<double>(c.reasoning_tokens) / n;
  return std::sqrt(std::max(0.0, (c.reasoning_tokens_sq - n * mean * mean) / (n - 1)));
}

nlohmann::json CountsJson(const EvalCounts& c) {
  return {{"episodes", c.episodes},
          {"success_rate", c.episodes ? static_cast<double>(c.successes) / c.episodes : 0.0},
          {"format_valid_rate", c.turns ? static_cast<double>(c.valid_turns) / c.turns : 0.0},
          {"turns", c.turns},
          {"successes", c.successes},
          {"mean_reasoning_tokens", c.episodes ? static_cast<double>(c.reasoning_tokens) / c.episodes : 0.0},
          {"sd_reasoning_tokens", ReasoningSd(c)}};
}

std::string CountsLine(const std::string& name, const EvalCounts& c) {
  char line[200];
  std::snprintf(line, sizeof(line), "  %-14s episodes %4d  success %5.1f%%  format-valid turns %5.1f%%  reasoning tokens/episode %6.1f\n",
                name.c_str(), c.episodes, c.episodes ? 100.0 * c.successes / c.episodes : 0.0,
                c.turns ? 100.0 * c.valid_turns / c.turns : 0.0,
                c.episodes ? static_cast<double>(c.reasoning_tokens) / c.episodes : 0.0);
  return line;
}

}  // namespace

nlohmann::json EvalReport::ToJson() const {
  nlohmann::json out = {{"total", CountsJson(total)}};
  for (const auto& [name, c] : by_scaffold) out["by_scaffold"][name] = CountsJson(c);
  for (const auto& [name, c] : by_family) out["by_family"][name] = CountsJson(c);
  for (const auto& [effort, c] : by_effort) out["by_effort"][std::to_string(effort)] = CountsJson(c);
  for (const auto& [d, c] : by_difficulty) out["by_difficulty"][std::to_string(d)] = CountsJson(c);
  out["failure_kinds"] = failure_kinds;
  out["episodes"] = nlohmann::json::array();
  for (const EvalEpisode& e : episodes) {
    out["episodes"].push_back(
        {{"index", e.index}, {"task", e.task}, {"effort", e.effort}, {"success", e.success},
         {"reasoning_tokens", e.reasoning_tokens}});
  }
  return out;
}

std::string EvalReport::ToText() const {
  std::string text = "by scaffold:\n";
  for (const auto& [name, c] : by_scaffold) text += CountsLine(name, c);
  text += "by family:\n";
  for (const auto& [name, c] : by_family) text += CountsLine(name, c);
  text += "by effort:\n";
  for (const auto& [effort, c] : by_effort) text += CountsLine("b=" + std::to_string(effort), c);
  text += "by difficulty:\n";
  for (const auto& [d, c] : by_difficulty) text += CountsLine("d=" + std::to_string(d), c);
  text += CountsLine("total", total);
  if (!failure_kinds.empty()) {
    text += "not counted, the environment broke:";
    for (const auto& [kind, n] : failure_kinds) text += " " + kind + " " + std::to_string(n);
    text += "\n";
  }
  return text;
}

Result<EvalReport> Evaluate(Policy& policy, const engine::Tokenizer& tokenizer,
                            sandbox::Manager& manager, const EvalOptions& options, Progress* progress) {
  tasks::InstanceSet set{options.families, options.min_difficulty, options.max_difficulty};
  std::vector<tasks::TaskInstance> instances;
  for (int i = 0; i < options.episodes_per_cell; ++i) {
    instances.push_back(tasks::Instance(options.purpose, options.seed, i, set));
  }
  struct Cell {
    const Scaffold* scaffold;
    int effort;
    size_t index;
    size_t task;
  };
  std::vector<Cell> cells;
  for (const Scaffold* scaffold : options.scaffolds) {
    for (int effort : options.efforts) {
      for (size_t i = 0; i < instances.size(); ++i) cells.push_back({scaffold, effort, cells.size(), i});
    }
  }
  EvalReport report;
  std::mutex mu;
  Status first_error;
  ThreadPool pool(static_cast<size_t>(std::max(1, options.threads)));
  pool.ParallelFor(cells.size(), [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      const Cell& cell = cells[i];
      const Task& task = instances[cell.task].task;
      EpisodeOptions episode_options;
      episode_options.effort = cell.effort;
      episode_options.temperature = options.temperature;
      episode_options.seed = instances[cell.task].seed;
      episode_options.max_turns = options.max_turns;
      episode_options.max_tokens = options.max_tokens;
      Result<Episode> episode = Status::Internal("not run");
      std::string failure_kind, failure;
      {
        auto workspace = SandboxWorkspace::Create(manager, options.sandbox);
        if (workspace.ok()) {
          episode = RunEpisode(policy, tokenizer, *cell.scaffold, task, **workspace, episode_options);
        } else {
          failure_kind = FailureKindName(FailureKind::kSandboxStart);
          failure = workspace.status().ToString();
        }
      }
      if (episode.ok() && episode->failure_kind) {
        failure_kind = FailureKindName(*episode->failure_kind);
        failure = episode->failure;
      }
      std::lock_guard<std::mutex> lock(mu);
      if (progress) progress->Advance();
      if (!failure_kind.empty()) {
        report.failure_kinds[failure_kind] += 1;
        if (report.failures.size() < 12) report.failures.push_back(task.id + ": " + failure_kind + ": " + failure);
        continue;
      }
      if (!episode.ok()) {
        if (first_error.ok()) first_error = episode.status().Wrap(task.id);
        continue;
      }
      Add(report.by_scaffold[cell.scaffold->name()], *episode);
      Add(report.by_family[task.family], *episode);
      Add(report.by_effort[cell.effort], *episode);
      Add(report.by_difficulty[task.difficulty], *episode);
      Add(report.total, *episode);
      report.episodes.push_back({cell.index, cell.task, cell.effort, episode->verdict.success, episode->reasoning_tokens()});
      if (!episode->verdict.success && report.failures.size() < 12) {
        report.failures.push_back(task.id + " [" + cell.scaffold->name() + "]: " + episode->verdict.reason);
      }
    }
  });
  if (!first_error.ok()) return first_error;
  std::sort(report.episodes.begin(), report.episodes.end(),
            [](const EvalEpisode& a, const EvalEpisode& b) { return a.index < b.index; });
  return report;
}

}  // namespace flashroll
