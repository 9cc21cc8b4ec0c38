#include "engine/models/generate.h"

#include <algorithm>
#include <cmath>

namespace flashroll::engine {

int32_t ArgMax(const float* values, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (values[i] > values[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

int32_t SampleToken(const float* logits, int64_t n, double temperature, std::mt19937_64* rng) {
  const float max = *std::max_element(logits, logits + n);
  std::vector<double> weights(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) weights[i] = std::exp((logits[i] - max) / temperature);
  std::discrete_distribution<int32_t> pick(weights.begin(), weights.end());
  return pick(*rng);
}

Result<std::vector<int32_t>> Generate(const Model& model, const std::vector<int32_t>& prompt,
                                      const GenerateOptions& options,
                                      const std::function<void(int32_t)>& on_token) {
  if (prompt.empty()) return Status::InvalidArgument("the prompt has no tokens");
  if (options.max_tokens < 0) return Status::InvalidArgument("max_tokens must not be negative");
  if (!(options.temperature >= 0)) return Status::InvalidArgument("temperature must not be negative");
  const std::vector<int64_t>& eos = model.config().eos_token_ids;
  const int64_t vocab = model.config().vocab_size;
  std::mt19937_64 rng(options.seed);
  KvCache cache = model.NewCache();
  std::vector<int32_t> out;
  std::vector<float> logits;
  std::vector<int32_t> next = prompt;
  while (static_cast<int64_t>(out.size()) < options.max_tokens) {
    FR_RETURN_IF_ERROR(model.Forward(next, &cache, false, &logits));
    const int32_t token =
        options.temperature == 0 ? ArgMax(logits.data(), vocab)
                                 : SampleToken(logits.data(), vocab, options.temperature, &rng);
    out.push_back(token);
    if (on_token) on_token(token);
    if (std::find(eos.begin(), eos.end(), token) != eos.end()) break;
    if (std::find(options.stop_tokens.begin(), options.stop_tokens.end(), token) != options.stop_tokens.end()) {
      break;
    }
    next.assign(1, token);
  }
  return out;
}

}  // namespace flashroll::engine
