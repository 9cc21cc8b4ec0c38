// Generate: the token-in/token-out decoding loop over a Model.
//
// The prompt is run once (prefill) and each new token is fed back through
// the KV cache. Temperature 0 is greedy decoding: the highest logit, ties to
// the lower token id (what torch.argmax does). A positive temperature samples
// from softmax(logits / T) with a generator seeded by `seed`, so a run is
// reproducible. Generation stops after max_tokens, or after emitting one of
// the config's eos_token_ids or options.stop_tokens (included in the output).
//
// Thread safety: reentrant; the Model is only read.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "common/status.h"
#include "engine/models/model.h"

namespace flashroll::engine {

struct GenerateOptions {
  int64_t max_tokens = 16;
  double temperature = 0.0;
  uint64_t seed = 0;
  std::vector<int32_t> stop_tokens;  // also end generation, besides the config's eos_token_ids
};

// Returns the generated tokens (not the prompt). `on_token`, when set, is
// called with each token as soon as it is chosen. Errors: an empty prompt, a
// negative max_tokens or temperature, or a token outside the vocabulary.
Result<std::vector<int32_t>> Generate(const Model& model, const std::vector<int32_t>& prompt,
                                      const GenerateOptions& options,
                                      const std::function<void(int32_t)>& on_token = nullptr);

// The index of the largest value, ties to the lower index. Precondition: n > 0.
int32_t ArgMax(const float* values, int64_t n);

// A token drawn from softmax(logits / temperature) with `rng`.
// Precondition: n > 0 and temperature > 0.
int32_t SampleToken(const float* logits, int64_t n, double temperature, std::mt19937_64* rng);

}  // namespace flashroll::engine
