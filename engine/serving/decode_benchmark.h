// DecodeBenchmark: the engine's throughput on one model, measured through
// the same Engine that serves requests (`flashroll bench decode`).
//
// Prefill: one request of prefill_tokens prompt tokens and one generated
// token, prefix caching off; prompt tokens per second. Decode: `batch`
// requests, each with a prompt of `context` tokens, decode `gen_tokens`
// tokens together; generated tokens per second over the interval in which
// every sequence is decoding (after the last first token, until the end).
// Prompts are deterministic pseudo-random token ids. Each figure is the
// median of `repeats` runs after one warm-up run.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "engine/models/model.h"
#include "engine/serving/engine.h"

namespace flashroll::engine {

struct DecodeBenchmarkOptions {
  int threads = 0;
  int64_t batch = 1;
  int64_t context = 64;
  int64_t gen_tokens = 64;
  int64_t prefill_tokens = 512;
  int repeats = 3;
  KvDType kv_dtype = KvDType::kBF16;
  DeviceSpec device;
};

struct DecodeBenchmarkResult {
  double tokens_per_s = 0;
  double prefill_tokens_per_s = 0;
};

Result<DecodeBenchmarkResult> RunDecodeBenchmark(const Model& model, const DecodeBenchmarkOptions& options);

}  // namespace flashroll::engine
