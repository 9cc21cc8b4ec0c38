// Job, the RL job's state and steps: shared by the files that implement
// RunRlJob (rl_job.cc: opening, running samples, monitoring, the summary;
// rl_job_training.cc: the trainer, its API and the published weights). Not
// part of the scheduler's API.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/json.h"
#include "common/sqlite.h"
#include "common/store.h"
#include "engine/models/model.h"
#include "engine/serving/engine.h"
#include "engine/serving/weight_loader.h"
#include "engine/tokenizer/tokenizer.h"
#include "rewards/length_reward.h"
#include "rollout/policy.h"
#include "rollout/scaffold.h"
#include "sandbox/sandbox.h"
#include "scheduler/ack_ledger.h"
#include "scheduler/batch_queue.h"
#include "scheduler/group_selection.h"
#include "scheduler/job_config.h"
#include "scheduler/job_store.h"
#include "scheduler/rl_job.h"
#include "scheduler/sample_scheduler.h"
#include "scheduler/teacher.h"
#include "scheduler/trainer_api.h"
#include "scheduler/trainer_supervisor.h"

namespace flashroll::rl_job_internal {

using Clock = std::chrono::steady_clock;

inline BatchQueueOptions QueueOptions(const JobConfig& config) {
  BatchQueueOptions options;
  options.lease_duration = config.trainer_api.lease_timeout;
  return options;
}

class Job {
 public:
  Job(const JobConfig& config, const RlJobOptions& options)
      : config_(config), options_(options), queue_(QueueOptions(config)),
        dynamic_sampling_(ParseDynamicSampling(config.scheduler.dynamic_sampling)),
        selector_(config.scheduler.task_selection) {}
  Result<RlJobSummary> Run();

 private:
  Status Open();
  void Worker();
  // Runs one sample and records it; then tells the scheduler.
  void RunSample(sqlite::Database& db, const SampleTicket& ticket);
  // Records the sandbox manager's events of a sample's sandbox (its OOM
  // kills, init exit, rootfs damage, timeouts, failed teardowns: the
  // repercussion signal) and that it was destroyed.
  void RecordSandboxEvents(sqlite::Database& db, const std::string& sandbox_id, int64_t sample_id);
  // Under mu_: advantages for each finished group, recorded and queued.
  // `opened_here`: the groups were opened by this run's scheduler (not
  // finished before a resume).
  void FinishGroups(sqlite::Database& db, const std::vector<int64_t>& groups, bool opened_here);
  void Monitor();
  // Training: the trainer API, the weight loader and the trainer process.
  Status StartTraining();
  // Training: after the rollouts, lets the trainer finish and waits for its
  // last published weights to be in the engine.
  Status FinishTraining();
  // The fixed evaluation set on the engine's current weights (training.eval_tasks).
  Result<Json> EvaluateNow(const char* when);
  // RlJobOptions::evaluate_only: the evaluation before (and with
  // evaluate_weights after) and nothing else.
  Result<RlJobSummary> EvaluateOnly();
  // The embedded engine's weight version and counters; 0 and zeros with an
  // external policy (its server keeps its own).
  int64_t WeightVersion() const { return engine_ ? engine_->weight_version() : 0; }
  engine::EngineStats EngineStats() const { return engine_ ? engine_->Stats() : engine::EngineStats{}; }
  // The HTML report (python -m flashroll.report) from the trainer's log and
  // the evaluation; a failure is a warning, the job's results stand.
  void WriteReport();
  // Where the job keeps a file of its own: beside the store, <name>-<suffix>.
  std::string JobFile(const std::string& suffix) const;
  std::string StatusLine(double seconds);
  // The task-mix cell of a planned group (task selection's unit).
  TaskCell CellOf(const GroupPlan& group) const;
  bool Stopping() const { return stop_.load() || (options_.stop && options_.stop->load()); }

  const JobConfig& config_;
  const RlJobOptions& options_;
  LengthRewardParams length_params_;
  std::unique_ptr<sqlite::Database> db_;  // the job thread's connection
  int64_t job_id_ = 0;
  std::vector<JobTask> tasks_;
  std::unique_ptr<engine::Model> model_;
  std::unique_ptr<engine::Tokenizer> tokenizer_;
  std::unique_ptr<engine::Engine> engine_;  // null with an external policy
  std::unique_ptr<Policy> policy_;
  std::unique_ptr<sandbox::Manager> manager_;
  const Scaffold* scaffold_ = nullptr;
  sandbox::SandboxSpec spec_;
  BatchQueue queue_;
  std::unique_ptr<TrainerApi> trainer_api_;
  std::unique_ptr<engine::WeightLoader> weights_;
  std::unique_ptr<Teacher> teacher_;  // distill; outlives the trainer that asks it
  std::unique_ptr<TrainerSupervisor> trainer_;
  Json eval_ = Json::object();  // {"before": ..., "after": ...}

  // Training: acks recorded at once, made durable by the next published
  // version (ack_ledger.h). A resumed job's last published version.
  std::unique_ptr<AckLedger> ledger_;
  std::optional<store::PublishedVersion> resume_point_;
  // The trainer died: what it acked and no published checkpoint holds is
  // queued again, for its successor (which resumes from that checkpoint).
  void TrainerRestarting();

  const DynamicSampling dynamic_sampling_;

  std::mutex mu_;  // guards everything below
  PassRateSelector selector_;
  std::condition_variable cv_;
  std::unique_ptr<SampleScheduler> scheduler_;
  std::map<int64_t, GroupPlan> groups_;  // by id
  RlJobSummary summary_;
  int64_t consumed_seen_ = 0;
  Status first_error_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> cancel_episodes_{false};
  std::atomic<bool> stalled_{false};  // no progress for scheduler.stall_timeout: the job fails
  // Engine occupancy, sampled by the monitor.
  int64_t polls_ = 0, busy_polls_ = 0, running_sum_ = 0;
};

}  // namespace flashroll::rl_job_internal
