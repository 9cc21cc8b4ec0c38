// `flashroll bench scheduler`: sample-level asynchronous dispatch against
// synchronous batch-level dispatch, on the same engine and the same fixed
// workload — agent trajectories whose per-turn generation lengths and tool
// times are drawn from a measured quickstart run (bench/data/
// quickstart_trajectories.txt). Each run gets a fresh engine; the workload
// (prompts, lengths, tool times, seeds) is identical. The modes run
// interleaved, `repeats` times each (sync, async, then async, sync, ...), so
// a drift in the machine's load falls on both; both run the job's staleness
// gate (an instant trainer consumes each batch of batch_groups finished
// groups). Tools are real by default: each sample gets a sandbox of its
// own (sandbox/sandbox.h, created when the sample starts and destroyed when
// it ends, as in the job), and each tool call runs python3 in it that
// returns when the call's share of the recorded tool time has passed since
// it was sent, so the host pays for sandbox starts, execs and interpreter
// starts beside the engine; `sleep` tools wait on the worker thread
// instead. The busy fraction is running-sequence-seconds over capacity:
// the integral of the engine's running sequences over the run, divided by
// in_flight times the run's wall clock.
//
// Thread safety: RunSchedulerBenchmark owns its threads.
#pragma once

#include <string>

#include "common/json.h"
#include "common/status.h"

namespace flashroll {

enum class BenchTools { kSandbox, kSleep };

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
  BenchTools tools = BenchTools::kSandbox;
};

// {"speedup" (the median of the runs' sync/async ratios, paired in run
// order), "speedup_min", "speedup_max", and per mode (suffix _sync, _async)
// the medians "seconds", "busy_fraction", "mean_batch" (running sequences,
// time-averaged over the time any ran), "tool_seconds" (the median tool
// call's wall clock, as the worker saw it), and every run's "runs_seconds"
// and "runs_tool_calls"; "groups", "group_size", "in_flight", "repeats",
// "tools" ("sandbox" or "sleep"), "order" (the modes in the order they
// ran)}.
Result<Json> RunSchedulerBenchmark(const SchedulerBenchmarkOptions& options);

}  // namespace flashroll
