// The RL job: tasks -> SampleScheduler -> episodes (the embedded engine,
// one sandbox per episode) -> rewards -> store -> complete groups with
// group-relative advantages -> the trainer's BatchQueue.
//
// Every sample is written to the store as it finishes (its turns, reward
// parts, timings) in one transaction, so `flashroll run --resume` after a
// SIGKILL re-runs only samples that had not finished: finished ones are
// never lost or duplicated. A group's advantages are computed from the
// store once its last sample finished, so a resumed group mixes old and new
// samples correctly.
//
// With `training:` the job starts the trainer (TrainerSupervisor), serves
// it the finished groups (TrainerApi) and loads the weights it publishes
// from training.checkpoint_dir (engine::WeightLoader): they are swapped
// into the engine at the next token boundary, running samples continue on
// them without re-prefill, each token keeping the version that produced it.
// The job ends when the trainer does (its steps taken, or the groups used
// up); the fixed evaluation set runs before the first step and after the
// last. A resumed training job starts on the last published weights.
//
// Thread safety: RunRlJob runs the job on its own threads and returns when
// it has finished or was stopped (Stop() from any thread, e.g. a signal).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/json.h"
#include "common/status.h"
#include "scheduler/job_config.h"

namespace flashroll {

struct EffortSummary {
  int64_t samples = 0, successes = 0, failed = 0;
  double reward_sum = 0;
  int64_t reasoning_tokens = 0;
};

struct RlJobSummary {
  int64_t job_id = 0;
  std::string status;  // "completed" or "paused" (stopped; resume with --resume)
  int64_t groups_done = 0, groups_total = 0;
  int64_t groups_unqueued = 0;  // finished with no sample to train on (rewards.failed: exclude): never queued
  // scheduler.dynamic_sampling: finished with no spread in reward or verdict: never queued
  int64_t groups_skipped_zero_variance = 0;
  // scheduler.task_selection: planned groups never opened, their cell's pass rate out of range
  int64_t groups_deselected = 0;
  int64_t samples_done = 0, samples_dropped = 0;  // by this run (a resumed job counts from the resume)
  double wall_seconds = 0;
  double busy_fraction = 0;  // share of wall time the engine had work
  double mean_batch = 0;     // mean running sequences while busy
  double engine_tokens_per_second = 0;
  std::map<int, EffortSummary> by_effort;
  // Infrastructure failures (rollout/failure_kind.h), every attempt, by kind
  // and by task then kind; the tasks quarantined for them.
  std::map<std::string, int64_t> failure_kinds;
  std::map<std::string, std::map<std::string, int64_t>> failure_kinds_by_task;
  std::vector<std::string> quarantined_tasks;
  // Training jobs: the engine's final weight version, how often the trainer
  // was restarted, the fixed evaluation before/after and the trainer's log.
  // Over the whole job, every run of it (store::JobTokenTotals): tokens the
  // engine computed in prefill passes for the samples' episodes, of those
  // the positions an episode had computed before, and the tokens of the
  // samples trainer steps consumed.
  int64_t prefill_tokens = 0, reprefill_tokens = 0, trained_tokens = 0;
  int64_t weight_version = 0;
  int64_t trainer_restarts = 0;
  Json eval = Json::object();
  std::string trainer_log;
  std::string report;  // the HTML report, when written

  std::string ToText() const;
  Json ToJson() const;
};

struct RlJobOptions {
  std::string config_yaml;  // stored with the job
  std::string resume;       // a job name or id to resume; empty: a new job
  // Called once the job has an id (before any sample runs).
  std::function<void(int64_t job_id)> on_started;
  // Called about every `status_interval` with a one-line status.
  std::function<void(const std::string& line)> on_status;
  std::chrono::milliseconds status_interval{2000};
  const std::atomic<bool>* stop = nullptr;  // set to stop early (the job pauses)
  // Runs no sample and no trainer: only training.eval_tasks' evaluation, on
  // model.path ("before") and, with `evaluate_weights` (a checkpoint beneath
  // training.checkpoint_dir, as the trainer publishes them), on those
  // weights ("after"), paired by episode. For the controls of `make
  // run-controls` (the base model at other temperatures, a trained one beside it).
  bool evaluate_only = false;
  std::string evaluate_weights;
};

Result<RlJobSummary> RunRlJob(const JobConfig& config, const RlJobOptions& options);

}  // namespace flashroll
