// Group selection: which finished groups the trainer gets and which planned
// groups open, so that every step's batch carries signal.
//
// Dynamic sampling (DAPO, Yu et al. 2025): a group whose samples all earned
// the same reward has advantage 0 for every sample and teaches nothing; a
// group whose samples all got the same verdict teaches at most the length
// term. With scheduler.dynamic_sampling set, such groups are recorded but
// never queued for the trainer, and the job opens more groups in their
// place (the staleness gate counts them as consumed), so a batch holds
// batch_groups groups that split.
//
// Task selection by measured pass rate: groups open only from cells (task
// family, difficulty, effort) whose recent pass rate lies strictly inside
// (min_pass_rate, max_pass_rate), where groups are likely to split. A cell
// is measured over its last `window` finished samples; until it has
// `min_samples` of them every group of it opens; outside the range one
// group in `probe_every` opens anyway, so a cell the policy learnt (or
// unlearnt) is measured again and can come back.
//
// Thread safety: none; the job calls these under its lock.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <span>
#include <string>
#include <tuple>

namespace flashroll {

enum class DynamicSampling {
  kNone,      // every finished group is queued
  kReward,    // skip groups whose samples' rewards are all equal (all advantages 0)
  kVerifier,  // skip groups whose samples' verdicts are all equal (DAPO's accuracy filter)
};

// "none" | "reward" | "verifier" (scheduler.dynamic_sampling, validated by the schema).
DynamicSampling ParseDynamicSampling(const std::string& name);

struct GroupSampleOutcome {
  double reward = 0;
  bool success = false;
  bool failed = false;  // an infrastructure failure or deadline: left out, as by GroupAdvantages
};

// True when `mode` keeps the group from the trainer: the samples that did
// not fail agree (in reward, or in verdict), or none is left.
bool IsZeroVariance(DynamicSampling mode, std::span<const GroupSampleOutcome> group);

struct PassRateSelection {
  bool enabled = false;
  double min_pass_rate = 0.0;  // open a cell's groups while min < rate < max
  double max_pass_rate = 1.0;
  int64_t window = 64;         // the cell's last samples the rate is measured over
  int64_t min_samples = 16;    // below this many, every group of the cell opens
  int64_t probe_every = 8;     // outside the range, one group in this many opens anyway
};

// One cell of the task mix: groups of it are alike in expected pass rate.
struct TaskCell {
  std::string family;
  int difficulty = 1;
  int effort = 100;
  auto operator<=>(const TaskCell&) const = default;
};

class PassRateSelector {
 public:
  explicit PassRateSelector(PassRateSelection selection) : selection_(selection) {}

  // Whether a group of `cell` should open now. A refusal counts towards
  // the cell's next probe.
  bool Accept(const TaskCell& cell);

  // A group of `cell` finished: `successes` of its `samples` succeeded
  // (failed samples left out by the caller).
  void Record(const TaskCell& cell, int64_t successes, int64_t samples);

  // The cell's measured pass rate and how many samples it is measured
  // over (0 and 0 before any).
  std::pair<double, int64_t> Rate(const TaskCell& cell) const;

 private:
  struct CellState {
    std::deque<bool> recent;  // the last `window` outcomes, oldest first
    int64_t successes = 0;    // in `recent`
    int64_t refused = 0;      // refusals since the last group of the cell opened
  };
  const PassRateSelection selection_;
  std::map<TaskCell, CellState> cells_;
};

}  // namespace flashroll
