// SwapBenchmark: what a weight swap costs sequences that are decoding
// (`flashroll bench swap`).
//
// `sequences` greedy requests (prompts of `context` pseudo-random tokens,
// prefix caching off) decode together; after `warmup_steps` tokens of the
// first request and `steps_before` more, Engine::SwapWeights swaps in `next`
// (read into memory before the requests start, as BuildCheckpoint does, so
// the background load of a real swap is not part of it) as version + 1; the
// run ends once the first request has `steps_after` tokens of the new
// version. Every token is timestamped when the benchmark reads it, right
// after the step that made it (the first request is waited on, the others
// read without waiting); a model so small that the engine runs ahead of the
// reader gives meaningless times.
//
// Reported:
//   gap_ms         from the last token of the old version to the first of
//                  the new one: one step plus what the swap added
//   step_ms        the median interval between two steps before the swap
//   swap_pause_ms  gap_ms - step_ms (at least 0): the time the loop spent
//                  swapping rather than stepping
//   swap_call_ms   how long SwapWeights blocked its caller (it waits for the
//                  step in flight)
//   tokens_per_s_before  over the steps_before steps before the call
//   tokens_per_s_during  from the call to the first token of the new version
//   tokens_per_s_after   from then until the end of the run
#pragma once

#include <cstdint>
#include <memory>

#include "common/status.h"
#include "engine/models/model.h"
#include "engine/serving/engine.h"

namespace flashroll::engine {

struct SwapBenchmarkOptions {
  int threads = 0;
  int64_t sequences = 32;
  int64_t context = 64;
  int64_t warmup_steps = 16;
  int64_t steps_before = 32;
  int64_t steps_after = 32;
  KvDType kv_dtype = KvDType::kBF16;
};

struct SwapBenchmarkResult {
  double swap_pause_ms = 0;
  double gap_ms = 0;
  double step_ms = 0;
  double swap_call_ms = 0;
  double tokens_per_s_before = 0;
  double tokens_per_s_during = 0;
  double tokens_per_s_after = 0;
  int64_t sequences = 0;
};

// Runs the benchmark on `model`, swapping to `next` (which must have the
// same shapes: Engine::SwapWeights' InvalidArgument otherwise).
// InvalidArgument for options below 1 (warmup_steps below 2).
Result<SwapBenchmarkResult> RunSwapBenchmark(const Model& model, std::unique_ptr<Model> next,
                                             const SwapBenchmarkOptions& options);

}  // namespace flashroll::engine
