// `flashroll bench scheduler`: sample-level asynchronous dispatch against
// synchronous batch-level dispatch, on the same engine and the same fixed
// workload — agent trajectories whose per-turn generation lengths and tool
// times are drawn from a measured quickstart run (bench/data/
// quickstart_trajectories.txt). Each mode gets a fresh engine; the
// workload (prompts, lengths, tool times, seeds) is identical.
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
  int64_t group_size = 4;
  int64_t in_flight = 16;
  int threads = 0;  // engine threads; 0 = all cores
  uint64_t seed = 1;
};

// {"speedup", "busy_fraction_async", "busy_fraction_sync", "mean_batch_async",
//  "mean_batch_sync", "seconds_async", "seconds_sync", "groups", "group_size", "in_flight"}
Result<Json> RunSchedulerBenchmark(const SchedulerBenchmarkOptions& options);

}  // namespace flashroll
