// Test hooks into the sampler's internals (sampler.cc), for the tests that
// check other implementations of its arithmetic bit for bit (the GPU draw).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>

namespace flashroll::engine {

// The block sum over logits[0, vocab) of the raw weights
// exp((l - l_max) x inv_t), exactly as Sampler::Sample sums them before it
// takes the log (its argmax, its exp, its blocks of 64, in ascending id).
double TEST_SamplerRawWeightSum(const float* logits, int64_t vocab, double inv_t);

}  // namespace flashroll::engine
