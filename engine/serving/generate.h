// Generate: one sequence through the serving engine, for callers that want a
// single continuation (the `generate` command, tests).
//
// It starts an Engine sized for this sequence (f32 KV by default, so greedy
// continuations follow the model's float32 logits) and reads the one choice
// back. Temperature 0 is greedy: the highest logit, ties to the lower token
// id (what torch.argmax does). Generation stops after max_tokens, or after
// one of the config's eos_token_ids or options.stop_tokens (included in the
// output).
//
// Thread safety: reentrant; the Model is only read.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "common/status.h"
#include "engine/models/model.h"
#include "engine/serving/engine.h"

namespace flashroll::engine {

struct GenerateOptions {
  int64_t max_tokens = 16;
  double temperature = 0.0;
  uint64_t seed = 0;
  std::vector<int32_t> stop_tokens;  // also end generation, besides the config's eos_token_ids
  KvDType kv_dtype = KvDType::kF32;
  int threads = 0;                   // 0 = all cores
  DeviceSpec device;                 // EngineOptions::device
};

// Returns the generated tokens (not the prompt). `on_token`, when set, is
// called with each token as soon as it is chosen. Errors: an empty prompt, a
// negative max_tokens or temperature, a token outside the vocabulary, or a
// prompt + max_tokens beyond the model's context.
Result<std::vector<int32_t>> Generate(const Model& model, const std::vector<int32_t>& prompt,
                                      const GenerateOptions& options,
                                      const std::function<void(int32_t)>& on_token = nullptr);

}  // namespace flashroll::engine
