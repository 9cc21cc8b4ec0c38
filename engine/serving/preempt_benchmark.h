// PreemptBenchmark: what pausing a long sequence costs, against recomputing
// it (`flashroll bench preempt`), measured through the Engine that serves
// requests.
//
// One repetition: a sequence with a prompt of `context` deterministic
// pseudo-random tokens (greedy, prefix caching off) is submitted; the time
// to its first token is reprefill_ms, a prefill of those tokens, which is
// what a preempted sequence recomputes. It is then paused in memory and
// resumed: resume_ms runs from Resume to its next token. Then it is paused
// to disk, its file is dropped from the page cache (posix_fadvise
// DONTNEED; the write already fsynced it) so the read comes from the
// device, and resumed: resume_from_disk_ms, again to its next token. Each
// resume-to-token time includes the one decode step at that context.
// persist_bytes_per_token is the file's size over the tokens whose KV it
// holds. Each figure is the median of `repeats` repetitions after a short
// warm-up request.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "engine/models/model.h"
#include "engine/serving/engine.h"

namespace flashroll::engine {

struct PreemptBenchmarkOptions {
  int threads = 0;
  int64_t context = 4096;
  int repeats = 3;
  KvDType kv_dtype = KvDType::kBF16;
  // Where the sequence file goes; empty: a fresh directory under $TMPDIR (or
  // /tmp), removed afterwards.
  std::string persist_dir;
};

struct PreemptBenchmarkResult {
  double resume_ms = 0;
  double resume_from_disk_ms = 0;
  double reprefill_ms = 0;
  double persist_bytes_per_token = 0;
};

Result<PreemptBenchmarkResult> RunPreemptBenchmark(const Model& model, const PreemptBenchmarkOptions& options);

}  // namespace flashroll::engine
