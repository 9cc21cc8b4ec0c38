// RlJobSummary's text and JSON forms (what `flashroll run` prints).
#include <cstdio>
#include <string>

#include "common/strings.h"
#include "scheduler/rl_job.h"
#include "scheduler/training_report.h"

namespace flashroll {

std::string RlJobSummary::ToText() const {
  std::string text = "job " + std::to_string(job_id) + " " + status + ": " + std::to_string(groups_done) + "/" +
                     std::to_string(groups_total) + " groups, " + std::to_string(samples_done) + " samples this run (" +
                     std::to_string(samples_dropped) + " dropped in warm-up) in " + FixedPoint(wall_seconds, 1) + " s\n";
  if (!failure_kinds.empty()) {
    text += "infrastructure failures (not rewarded, the slot ran again):";
    for (const auto& [kind, n] : failure_kinds) text += " " + kind + " " + std::to_string(n);
    text += "\n";
  }
  if (!quarantined_tasks.empty()) {
    text += "quarantined (their environment kept failing):";
    for (const std::string& task : quarantined_tasks) text += " " + task;
    text += "\n";
  }
  if (groups_unqueued > 0) {
    text += std::to_string(groups_unqueued) + " groups had no sample to train on (all failed, rewards.failed: exclude)\n";
  }
  if (groups_skipped_zero_variance > 0) {
    text += std::to_string(groups_skipped_zero_variance) +
            " groups were not trained on: every sample alike (scheduler.dynamic_sampling)\n";
  }
  if (groups_deselected > 0) {
    text += std::to_string(groups_deselected) +
            " planned groups were not opened: their cell's pass rate out of range (scheduler.task_selection)\n";
  }
  text += "engine: busy " + FixedPoint(100 * busy_fraction, 1) + "% of the time, mean batch " + FixedPoint(mean_batch, 1) +
          " sequences, " + FixedPoint(engine_tokens_per_second, 0) + " generated tokens/s\n";
  text += "prefill: " + std::to_string(prefill_tokens) + " tokens, " + std::to_string(reprefill_tokens) +
          " of them computed again; " + std::to_string(trained_tokens) + " tokens trained on\n";
  char line[160];
  std::snprintf(line, sizeof(line), "%8s %8s %8s %8s %12s %18s\n", "effort", "samples", "success", "failed",
                "mean reward", "reasoning tokens");
  text += line;
  for (const auto& [effort, e] : by_effort) {
    const double n = e.samples ? static_cast<double>(e.samples) : 1.0;
    std::snprintf(line, sizeof(line), "%8d %8lld %7.1f%% %8lld %12.3f %18.1f\n", effort,
                  static_cast<long long>(e.samples), 100.0 * static_cast<double>(e.successes) / n,
                  static_cast<long long>(e.failed), e.reward_sum / n, static_cast<double>(e.reasoning_tokens) / n);
    text += line;
  }
  if (!trainer_log.empty()) {
    text += "training: weight version " + std::to_string(weight_version) + ", trainer restarts " +
            std::to_string(trainer_restarts) + ", per step (" + trainer_log + "):\n" + TrainingStepsTable(trainer_log);
  }
  if (const std::string comparison = EvalComparison(eval); !comparison.empty()) {
    text += "fixed evaluation set, before the first step -> after the last:\n" + comparison;
  } else if (eval.contains("before")) {
    text += "fixed evaluation set:\n" + EvalOverview(eval["before"]);
  }
  if (!report.empty()) text += "report: " + report + "\n";
  return text;
}

Json RlJobSummary::ToJson() const {
  Json by = Json::object();
  for (const auto& [effort, e] : by_effort) {
    const double n = e.samples ? static_cast<double>(e.samples) : 1.0;
    by[std::to_string(effort)] = {{"samples", e.samples},
                                  {"success_rate", static_cast<double>(e.successes) / n},
                                  {"failed", e.failed},
                                  {"mean_reward", e.reward_sum / n},
                                  {"mean_reasoning_tokens", static_cast<double>(e.reasoning_tokens) / n}};
  }
  Json by_task = Json::object();
  for (const auto& [task, kinds] : failure_kinds_by_task) by_task[task] = Json(kinds);
  return {{"job_id", job_id},       {"status", status},
          {"failure_kinds", {{"by_kind", Json(failure_kinds)}, {"by_task", by_task}}},
          {"quarantined_tasks", Json(quarantined_tasks)},
          {"groups_done", groups_done}, {"groups_total", groups_total}, {"groups_unqueued", groups_unqueued},
          {"groups_skipped_zero_variance", groups_skipped_zero_variance}, {"groups_deselected", groups_deselected},
          {"samples_done", samples_done}, {"samples_dropped", samples_dropped},
          {"wall_seconds", wall_seconds}, {"busy_fraction", busy_fraction},
          {"mean_batch", mean_batch},   {"engine_tokens_per_second", engine_tokens_per_second},
          {"by_effort", by},
          {"prefill_tokens", prefill_tokens}, {"reprefill_tokens", reprefill_tokens}, {"trained_tokens", trained_tokens},
          {"weight_version", weight_version}, {"trainer_restarts", trainer_restarts},
          {"eval", eval}, {"report", report}};
}

}  // namespace flashroll
