// SampleScheduler: which sample starts next — the sample-level asynchronous
// dispatch policy of an RL job, with no threads or I/O of its own (the job
// calls it under its lock), so every rule is tested directly.
//
// The work is a list of groups: G samples of one task at one effort b. A
// group opens as soon as all G of its samples fit under the caps (total in
// flight, per task), and its samples start at once; groups finish one by one
// whenever their last sample does, not batch by batch. Against the biases
// asynchrony brings:
// - staleness: with a trainer, groups open only while
//     opened <= consumed + unqueued + (max_staleness + 1) * batch_groups
//   (the AReaL bound: a sample can lag the trainer by at most max_staleness
//   versions when consumed; `unqueued` are finished groups with nothing to
//   train on, which the trainer never consumes), and LossMask() masks tokens older than
//   current - max_staleness: once when a sample finishes (against the
//   engine's version) and again when its group is leased (TrainerApi,
//   against the version the trainer holds), where the bound must hold;
// - length bias: the first `warmup_samples` samples to finish come back
//   early because they are short; those under `warmup_min_tokens` are
//   dropped and their slot runs again with a fresh seed;
// - per-family rate limits: a token bucket per task family, G tokens per
//   group, refilled at `rate` samples/s (a family over its rate waits; the
//   others go on).
// `synchronous` turns it into batch-level scheduling (the baseline of
// `flashroll bench scheduler`): a round of groups opens only when the
// previous round has fully finished. `select`, when set, is asked about
// each group about to open (none of its slots run yet); a group it refuses
// is dropped from the plan for good (task selection, group_selection.h).
//
// Thread safety: none; the caller serialises.
#pragma once

#include <chrono>
#include <functional>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

namespace flashroll {

// One group to run, in the order groups should open.
struct GroupPlan {
  int64_t group_id = 0;
  int64_t task_index = 0;  // the job's task list
  std::string family;
  int effort = 100;
  std::set<int> slots_done;  // slots already finished (a resumed job); the others run
  int missing(int64_t group_size) const { return static_cast<int>(group_size) - static_cast<int>(slots_done.size()); }
};

struct SchedulerPolicy {
  int64_t group_size = 8;
  int64_t max_in_flight = 32;
  int64_t max_per_task = 16;
  int64_t max_staleness = 1;
  int64_t batch_groups = 4;
  bool staleness_gate = true;  // off without a trainer (nothing is consumed)
  int64_t warmup_samples = 0;
  int64_t warmup_min_tokens = 0;
  std::map<std::string, double> rate_limits;  // family -> samples per second
  bool synchronous = false;
  // How often a slot runs again after an infrastructure failure (Finish).
  int64_t infra_retries = 2;
  std::function<bool(const GroupPlan&)> select;  // empty: every group opens
};

// One sample to start.
struct SampleTicket {
  int64_t group_id = 0;
  int64_t task_index = 0;
  int effort = 100;
  int slot = 0;      // 0..G-1 within the group
  int attempt = 0;   // > 0 when a warm-up drop or an infrastructure failure re-runs the slot
  int infra_attempt = 0;  // infrastructure failures of this slot so far
};

class SampleScheduler {
 public:
  using Clock = std::chrono::steady_clock;

  SampleScheduler(SchedulerPolicy policy, std::vector<GroupPlan> groups, Clock::time_point start);

  // The next sample to start at `now`, or nullopt when the caps, the
  // staleness bound or a rate limit say wait (or nothing is left).
  std::optional<SampleTicket> Next(Clock::time_point now);

  // A sample ended. Returns false when the warm-up dropped it or it failed
  // for the infrastructure (`infra`) within policy.infra_retries (its slot
  // runs again); true when it counts toward its group. A slot whose
  // infrastructure failures spent the retries counts (as failed) and
  // quarantines its task: none of the task's groups opens from then on
  // (they leave groups_total).
  bool Finish(const SampleTicket& ticket, int64_t generated_tokens, bool failed, bool infra = false);

  // Task indexes quarantined so far, and the groups that never opened for it.
  const std::set<int64_t>& quarantined() const { return quarantined_; }
  int64_t groups_quarantined() const { return groups_quarantined_; }
  int64_t infra_retried() const { return infra_retried_; }

  // Groups whose every sample finished since the last call, in finishing order.
  std::vector<int64_t> TakeFinishedGroups();

  // The trainer consumed `groups` groups (acknowledged a batch).
  void Consumed(int64_t groups) { consumed_ += groups; }
  // `groups` this scheduler opened finished with nothing to train on (every
  // sample failed under rewards.failed: exclude): never queued, so never
  // consumed; the staleness bound counts them as consumed.
  void Unqueued(int64_t groups) { unqueued_ += groups; }

  // The counts Next() decides on and the staleness bound's arithmetic, for
  // the report of a job that stalled.
  std::string WaitReason() const;

  int64_t in_flight() const { return in_flight_; }
  int64_t groups_total() const { return total_groups_; }
  int64_t groups_finished() const { return groups_finished_; }
  int64_t samples_dropped() const { return dropped_; }
  int64_t groups_deselected() const { return deselected_; }  // refused by `select`
  bool done() const { return groups_finished_ == groups_total(); }

  // 1 where a token may be learned from: sampled (version >= 0) and at most
  // max_staleness versions behind `current_version`.
  static std::vector<uint8_t> LossMask(std::span<const int32_t> versions, int64_t current_version,
                                       int64_t max_staleness);

 private:
  struct OpenGroup {
    int64_t task_index;
    int finished = 0;
  };
  bool RoomForAGroup(const GroupPlan& group) const;  // the caps on all samples and the staleness bound
  int64_t GateLimit() const;  // the most groups the staleness bound lets be opened now
  bool GroupMayOpen(const GroupPlan& group, Clock::time_point now);  // its task's cap, its family's rate
  void Refill(Clock::time_point now);

  SchedulerPolicy policy_;
  std::vector<GroupPlan> plan_;
  size_t next_group_ = 0;          // plan_[next_group_..] not opened yet
  std::vector<SampleTicket> ready_;  // tickets of open groups not started yet
  std::map<int64_t, OpenGroup> open_;
  std::map<int64_t, int64_t> task_in_flight_;  // task index -> samples started and not finished
  std::map<std::string, double> buckets_;      // family -> tokens
  Clock::time_point refilled_;
  std::vector<int64_t> finished_;
  int64_t in_flight_ = 0;
  int64_t opened_ = 0;
  int64_t consumed_ = 0;
  int64_t unqueued_ = 0;
  int64_t groups_finished_ = 0;
  int64_t total_groups_ = 0;
  int64_t samples_finished_ = 0;
  int64_t dropped_ = 0;
  int64_t deselected_ = 0;
  int64_t round_open_ = 0;  // synchronous: groups of the current round still open
  std::set<int64_t> quarantined_;
  int64_t groups_quarantined_ = 0;
  int64_t infra_retried_ = 0;
};

}  // namespace flashroll
