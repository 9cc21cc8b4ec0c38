// Cost of one Sampler::Sample call on a 49,152-token vocabulary (SmolLM's),
// per sampling mode, on peaked logits (a few tokens far above the rest: a
// small nucleus) and flat ones (a nucleus of about 10,000 tokens).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "engine/sampling/sampler.h"

namespace {

using flashroll::engine::Sampler;
using flashroll::engine::SamplingParams;

constexpr int64_t kVocab = 49152;

std::vector<float> Logits(bool peaked) {
  std::mt19937 rng(peaked ? 12 : 11);
  std::normal_distribution<float> normal(0, peaked ? 1.5f : 2.0f);
  std::vector<float> x(kVocab);
  for (float& v : x) v = normal(rng);
  if (peaked) {
    for (int i = 0; i < 8; ++i) x[static_cast<size_t>(i * 4099 + 17)] += 14.0f - static_cast<float>(i);
  }
  return x;
}

// range(0): 0 flat, 1 peaked; range(1): 0 greedy, 1 temperature 0.8, 2 top_p 0.9,
// 3 top_k 50, 4 min_p 0.05, 5 top_p 0.9 with penalties over 1,000 tokens.
void BM_Sample(benchmark::State& state) {
  const std::vector<float> logits = Logits(state.range(0) == 1);
  SamplingParams p;
  std::vector<int32_t> history;
  switch (state.range(1)) {
    case 0: p.temperature = 0; break;
    case 1: p.temperature = 0.8; break;
    case 2: p.top_p = 0.9; break;
    case 3: p.top_k = 50; break;
    case 4: p.min_p = 0.05; break;
    default:
      p.top_p = 0.9;
      p.repetition_penalty = 1.1;
      p.presence_penalty = 0.5;
      for (int i = 0; i < 1000; ++i) history.push_back((i * 7919) % static_cast<int32_t>(kVocab));
  }
  Sampler sampler(kVocab);
  uint64_t index = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(sampler.Sample(logits.data(), p, history, history, 0, index++).token);
  }
}
BENCHMARK(BM_Sample)->ArgsProduct({{0, 1}, {0, 1, 2, 3, 4, 5}})->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
