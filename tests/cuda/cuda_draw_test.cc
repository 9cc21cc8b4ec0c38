// Sampling on the GPU under the CPU sampler's contract: the device draw
// (engine/cuda DrawRows, finished by Sampler::FinishDeviceDraw) gives the
// weight sum, token, logprob and processed logprob the CPU Sampler gives for the same
// logits, seed, choice and token index, bit for bit; and a seeded request
// sampled on the GPU by the engine is what the host sampler draws from the
// GPU's own logits.
//
// Skips, saying why, where no usable GPU is present.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "engine/device/device_kernels.h"
#include "engine/models/model.h"
#include "engine/sampling/sampler.h"
#include "engine/sampling/sampler_testing.h"
#include "engine/serving/device_logits.h"
#include "engine/serving/engine.h"
#include "tests/engine/engine_fixture.h"
#include "tests/cuda/cuda_test_support.h"

namespace flashroll::engine {
namespace {

using cuda_testing::kGpu;

using testing::SameBits;

// Rows that reach every branch: spread and peaked rows (the draw lands in
// many blocks, or in the top one), ties at the top (the lower id wins),
// -inf entries, a flat row, a NaN that must never win.
std::vector<float> Rows(int64_t rows, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows * vocab));
  for (int64_t r = 0; r < rows; ++r) {
    float* row = &x[r * vocab];
    const float scale = 0.5f + static_cast<float>(r % 7);
    for (int64_t i = 0; i < vocab; ++i) row[i] = normal(rng) * scale;
    switch (r % 6) {
      case 1: row[vocab / 3] = 40.0f; break;  // peaked
      case 2: row[7] = row[vocab - 3] = 60.0f; break;  // a tie at the top
      case 3: for (int64_t i = 0; i < vocab; i += 3) row[i] = -std::numeric_limits<float>::infinity(); break;
      case 4: for (int64_t i = 0; i < vocab; ++i) row[i] = 1.25f; break;  // flat
      case 5: row[vocab / 2] = std::numeric_limits<float>::quiet_NaN(); break;
      default: break;
    }
  }
  return x;
}

class CudaDrawTest : public ::testing::TestWithParam<int64_t> {};

// The vocabularies: Qwen3's (151936, whole blocks of 64) and one with a
// tail block (1000).
TEST_P(CudaDrawTest, DrawsEqualTheCpuSamplersBitwise) {
  SKIP_WITHOUT_GPU();
  const int64_t vocab = GetParam();
  const int64_t rows = 48;
  const std::vector<float> logits = Rows(rows, vocab, static_cast<uint32_t>(vocab));
  for (double temperature : {0.0, 1.0, 0.7, 1.6}) {
    std::vector<SamplingParams> params(rows);
    std::vector<uint64_t> choices(rows), indices(rows);
    for (int64_t r = 0; r < rows; ++r) {
      params[r].temperature = temperature;
      params[r].seed = 1000 + static_cast<uint64_t>(r);
      params[r].processed_logprobs = r % 2 == 0;
      choices[r] = static_cast<uint64_t>(r % 3);
      indices[r] = static_cast<uint64_t>(r * 5);
    }
    auto device = DeviceDrawRows(kGpu, logits, vocab, params, choices, indices);
    ASSERT_TRUE(device.ok()) << device.status().ToString();
    Sampler cpu(vocab);
    for (int64_t r = 0; r < rows; ++r) {
      const SampledToken want = cpu.Sample(&logits[r * vocab], params[r], {}, {}, choices[r], indices[r]);
      const SampledToken& got = (*device)[r].sampled;
      // The sum itself, bit for bit: an ulp off in a weight seldom moves a
      // float logprob or a drawn token, so those alone would not show it.
      const double sum = TEST_SamplerRawWeightSum(&logits[r * vocab], vocab, temperature > 0 ? 1.0 / temperature : 1.0);
      EXPECT_EQ(0, std::memcmp(&sum, &(*device)[r].draw.weight_sum, sizeof(double))) << "T " << temperature << " row " << r;
      ASSERT_EQ(got.token, want.token) << "T " << temperature << " row " << r;
      EXPECT_TRUE(SameBits(got.logprob, want.logprob)) << "T " << temperature << " row " << r;
      EXPECT_TRUE(SameBits(got.processed_logprob, want.processed_logprob)) << "T " << temperature << " row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, CudaDrawTest, ::testing::Values(int64_t{151936}, int64_t{1000}));

TEST(CudaDrawEngineTest, SeededRequestSampledOnTheGpuIsTheHostSamplersDrawFromTheGpusLogits) {
  SKIP_WITHOUT_GPU();
  auto model = Model::Load("models/default");
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const GenerationRequest request = testing::Sampled(testing::Prompt(3, 29), 16, 77);
  EngineOptions options;
  options.device = kGpu;
  options.kv_memory_bytes = 64 << 20;
  options.kv_dtype = KvDType::kF32;  // DeviceLogits' KV
  auto engine = Engine::Start(**model, nullptr, options);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  auto out = (*engine)->Generate(request);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const Choice& choice = (*out)[0];
  ASSERT_EQ(choice.tokens.size(), 16u);
  // Prefill equals decode bitwise on the GPU, so one pass over prompt and
  // output gives every step's logits.
  std::vector<int32_t> all = request.prompt;
  all.insert(all.end(), choice.tokens.begin(), choice.tokens.end() - 1);
  auto logits = DeviceLogits(**model, kGpu, all);
  ASSERT_TRUE(logits.ok()) << logits.status().ToString();
  const int64_t vocab = (*model)->config().vocab_size;
  Sampler host(vocab);
  std::vector<int32_t> output;
  for (size_t i = 0; i < choice.tokens.size(); ++i) {
    const float* row = logits->data() + (request.prompt.size() - 1 + i) * vocab;
    const SampledToken want = host.Sample(row, request.sampling, request.prompt, output, 0, i);
    ASSERT_EQ(choice.tokens[i], want.token) << "token " << i;
    EXPECT_TRUE(SameBits(choice.samples[i].logprob, want.logprob)) << "token " << i;
    output.push_back(want.token);
  }
}

}  // namespace
}  // namespace flashroll::engine
