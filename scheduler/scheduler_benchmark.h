// `flashroll bench scheduler`: sample-level asynchronous dispatch against
// synchronous batch-level dispatch, on the same engine and the same fixed
// workload — agent trajectories whose per-turn generation lengths and tool
// times are drawn from a measured quickstart run (bench/data/
// quickstart_trajectories.txt). Each run gets a fresh engine; the workload
// (prompts, lengths, tool times, seeds) is identical. The modes run
// interleaved, `repeats` times each (sync, async, then async, sync, ...), so
// a drift in the machine's load falls on both; both run the job's staleness
// gate (an instant trainer consumes each batch of batch_groups finished
// groups). The busy fraction is running-sequence-seconds over capacity:
// the integral of the engine's running sequences over the run, divided by
// in_flight times the run's wall clock.
//
// Thread safety: RunSchedulerBenchmark owns its threads.
#pragma once

#include <string>

#include "common/json.h"
#include "common/status.h"

namespace flashroll {

struct SchedulerBenchmarkOptions {
  std::string model_path = "models/default";
  std::string trajectories_path = "bench/data/quickstart_trajectories.txt";
  int64_t groups = 32;
  int64_t group_size = 8;    // the quickstart's
  int64_t in_flight = 16;    // the quickstart's max_in_flight
  int64_t max_staleness = 1;  // the quickstart's staleness gate
  int64_t batch_groups = 4;
  int64_t repeats = 3;       // runs of each mode
  int threads = 0;  // engine threads; 0 = all cores
  uint64_t seed = 1;
};

// {"speedup" (the median of the runs' sync/async ratios, paired in run
// order), "speedup_min", "speedup_max", and per mode (suffix _sync, _async)
// the medians "seconds", "busy_fraction", "mean_batch" (running sequences,
// time-averaged over the time any ran) and every run's "runs_seconds";
// "groups", "group_size", "in_flight", "repeats", "order" (the modes in the
// order they ran)}.
Result<Json> RunSchedulerBenchmark(const SchedulerBenchmarkOptions& options);

}  // namespace flashroll
