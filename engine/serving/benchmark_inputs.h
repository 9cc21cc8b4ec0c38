// What the engine's benchmarks (decode, preempt) share: their prompts and
// how they summarise repeats.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

namespace flashroll::engine {

// `len` token ids below `vocab` from an xorshift stream keyed by `seed`: the
// same prompt for the same arguments in every run.
std::vector<int32_t> PseudoRandomPrompt(int64_t len, int64_t vocab, uint64_t seed);

// The upper median of `v` (its element at size / 2 once sorted); `v` is not empty.
double UpperMedian(std::vector<double> v);

}  // namespace flashroll::engine
