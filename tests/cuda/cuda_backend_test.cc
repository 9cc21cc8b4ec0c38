// The CUDA backend on the GPU: parity with Hugging Face transformers on the
// parity fixtures (tests/data/parity/, f32 weights, dense and MoE), and exactness on
// the shipped bf16 model: a seeded request gives the same tokens and
// bitwise-identical logprobs alone and among 16 others with chunked prefill
// mixed in, and prefill equals decode bitwise.
//
// Every test skips, saying why, where no usable GPU is present (CI, a build
// without CUDA); scripts/device-run.sh runs them on the GPU machine.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/json.h"
#include "engine/device/device.h"
#include "engine/models/model.h"
#include "engine/serving/backend.h"
#include "engine/serving/device_logits.h"
#include "engine/serving/engine.h"
#include "engine/serving/generate.h"
#include "tests/engine/engine_fixture.h"
#include "tests/cuda/cuda_test_support.h"

namespace flashroll::engine {
namespace {

using cuda_testing::GpuOptions;
using cuda_testing::kGpu;

using cuda_testing::Ints;
using cuda_testing::LoadOrDie;
using cuda_testing::ReadFloats;

class CudaParityTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaParityTest, LogitsAndGreedyMatchTransformers) {
  SKIP_WITHOUT_GPU();
  const std::string dir = "tests/data/parity/" + GetParam();
  Result<Json> ref = ReadJsonFile(dir + "/reference.json");
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  const std::vector<float> expected = ReadFloats(dir + "/logits.bin");
  std::unique_ptr<Model> model = LoadOrDie(dir);
  ASSERT_NE(model, nullptr);
  double worst = 0;
  for (const Json& prompt : (*ref)["prompts"]) {
    const int64_t rows = prompt["rows"].get<int64_t>();
    const int64_t cols = prompt["cols"].get<int64_t>();
    const int64_t offset = prompt["offset"].get<int64_t>();
    Result<std::vector<float>> logits = DeviceLogits(*model, kGpu, Ints(prompt["tokens"]));
    ASSERT_TRUE(logits.ok()) << logits.status().ToString();
    ASSERT_EQ(logits->size(), static_cast<size_t>(rows * cols));
    for (int64_t i = 0; i < rows * cols; ++i) {
      worst = std::max(worst, static_cast<double>(std::fabs((*logits)[i] - expected[offset + i])));
    }
  }
  std::printf("[ parity ] %s: max |logit - transformers| = %.3g\n", GetParam().c_str(), worst);
  EXPECT_LE(worst, 1e-3) << GetParam();
  for (const Json& g : (*ref)["greedy"]) {
    GenerateOptions options;
    options.max_tokens = g["max_new_tokens"].get<int64_t>();
    options.device = kGpu;
    Result<std::vector<int32_t>> out = Generate(*model, Ints(g["tokens"]), options);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(*out, Ints(g["output"])) << GetParam();
  }
}

INSTANTIATE_TEST_SUITE_P(DenseFixtures, CudaParityTest,
                         ::testing::Values("llama", "llama3_tied", "qwen2", "qwen3"));
INSTANTIATE_TEST_SUITE_P(MoeFixtures, CudaParityTest,
                         ::testing::Values("qwen3_moe", "qwen3_moe_mixed", "qwen2_moe"));

// The shipped bf16 model (bf16 weights on the GPU) against the CPU engine:
// close logits, and the same greedy tokens.
TEST(CudaBackendTest, Bf16ModelAgreesWithTheCpu) {
  SKIP_WITHOUT_GPU();
  std::unique_ptr<Model> model = LoadOrDie("models/default");
  ASSERT_NE(model, nullptr);
  std::vector<int32_t> tokens;
  for (int i = 0; i < 48; ++i) tokens.push_back(3 + (i * 104729) % 2400);
  Result<std::vector<float>> gpu = DeviceLogits(*model, kGpu, tokens);
  Result<std::vector<float>> cpu = DeviceLogits(*model, DeviceSpec{}, tokens);
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  double worst = 0;
  for (size_t i = 0; i < gpu->size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs((*gpu)[i] - (*cpu)[i])));
  std::printf("[ bf16 ] models/default: max |gpu - cpu| logit = %.3g\n", worst);
  EXPECT_LE(worst, 5e-3);  // the same bf16 weights and f32 arithmetic, summed in another order
  GenerateOptions options;
  options.max_tokens = 24;
  const std::vector<int32_t> prompt(tokens.begin(), tokens.begin() + 20);
  Result<std::vector<int32_t>> on_cpu = Generate(*model, prompt, options);
  options.device = kGpu;
  Result<std::vector<int32_t>> on_gpu = Generate(*model, prompt, options);
  ASSERT_TRUE(on_cpu.ok() && on_gpu.ok());
  EXPECT_EQ(*on_gpu, *on_cpu);
}

using testing::Prompt;
using testing::Sampled;

void ExpectSameBits(const Choice& a, const Choice& b) {
  ASSERT_EQ(a.tokens, b.tokens);
  for (size_t i = 0; i < a.samples.size(); ++i) {
    ASSERT_EQ(0, std::memcmp(&a.samples[i].logprob, &b.samples[i].logprob, sizeof(float))) << "token " << i;
  }
}

TEST(CudaBackendTest, SeededRequestIsBitwiseTheSameAloneAndAmong16) {
  SKIP_WITHOUT_GPU();
  std::unique_ptr<Model> model = LoadOrDie("models/default");
  ASSERT_NE(model, nullptr);
  const GenerationRequest probe = Sampled(Prompt(5, 37), 20, 1234);
  Choice alone;
  {
    auto engine = Engine::Start(*model, nullptr, GpuOptions());
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    auto out = (*engine)->Generate(probe);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    alone = (*out)[0];
  }
  ASSERT_EQ(alone.tokens.size(), 20u);
  EngineOptions options = GpuOptions();
  options.max_batch_tokens = 64;  // prefills split into chunks that mix with decodes
  auto engine = Engine::Start(*model, nullptr, options);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  std::vector<std::shared_ptr<RequestStream>> others;
  for (int i = 0; i < 8; ++i) others.push_back(*(*engine)->Submit(Sampled(Prompt(100 + i, 20 + 13 * i), 30, i)));
  auto probe_stream = (*engine)->Submit(probe);
  ASSERT_TRUE(probe_stream.ok());
  for (int i = 8; i < 16; ++i) others.push_back(*(*engine)->Submit(Sampled(Prompt(100 + i, 50 + 7 * i), 10, i)));
  const std::vector<Choice> batched = (*probe_stream)->Collect();
  for (auto& s : others) s->Collect();
  ExpectSameBits(alone, batched[0]);
}

// Every position's logits bitwise the same whether it ran in one prefill
// pass or as a decode step through the paged KV: 40 positions (two of
// attention's 32-position chunks) and 300 (ten chunks, so warps 0 and 1 of
// the attention block take two each), the decode's blocks in another order
// than the prefill's.
class CudaPrefillDecodeTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(CudaPrefillDecodeTest, PrefillEqualsDecodeBitwise) {
  SKIP_WITHOUT_GPU();
  std::unique_ptr<Model> model = LoadOrDie("models/default");
  ASSERT_NE(model, nullptr);
  const std::vector<int32_t> tokens = Prompt(9, GetParam());
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t vocab = model->config().vocab_size;
  Result<std::vector<float>> whole = DeviceLogits(*model, kGpu, tokens);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  auto backend = NewCudaBackend(*model, kGpu);
  ASSERT_TRUE(backend.ok()) << backend.status().ToString();
  const KvLayout layout = model->KvLayoutFor(16, KvDType::kF32);
  const int64_t blocks = (n + 15) / 16;
  ASSERT_TRUE((*backend)->AllocateKv(layout, blocks + 4).ok());
  std::vector<int32_t> table;  // not the prefill's blocks: from the pool's end, backwards
  for (int64_t b = 0; b < blocks; ++b) table.push_back(static_cast<int32_t>(blocks + 3 - b));
  std::vector<float> step(static_cast<size_t>(vocab));
  for (int64_t t = 0; t < n; ++t) {
    ForwardBatch batch;
    batch.tokens = {tokens[t]};
    batch.seqs.push_back({t, 1, table.data()});
    batch.logit_rows = {0};
    ASSERT_TRUE((*backend)->Forward(batch, step.data(), nullptr).ok());
    ASSERT_EQ(0, std::memcmp(step.data(), whole->data() + t * vocab, vocab * sizeof(float))) << "position " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(Lengths, CudaPrefillDecodeTest, ::testing::Values(40, 300));

// KV exported from the GPU is the device-neutral layout: importing it into
// other blocks and decoding on gives the same logits as never leaving.
TEST(CudaBackendTest, KvExportImportRoundTrips) {
  SKIP_WITHOUT_GPU();
  std::unique_ptr<Model> model = LoadOrDie("models/default");
  ASSERT_NE(model, nullptr);
  const int64_t vocab = model->config().vocab_size;
  auto backend = NewCudaBackend(*model, kGpu);
  ASSERT_TRUE(backend.ok()) << backend.status().ToString();
  const KvLayout layout = model->KvLayoutFor(16, KvDType::kBF16);
  ASSERT_TRUE((*backend)->AllocateKv(layout, 8).ok());
  const std::vector<int32_t> tokens = Prompt(3, 21);
  const std::vector<int32_t> first = {0, 1}, second = {6, 3};
  ForwardBatch prefill;
  prefill.tokens = tokens;
  prefill.seqs.push_back({0, 21, first.data()});
  ASSERT_TRUE((*backend)->Forward(prefill, nullptr, nullptr).ok());
  std::vector<uint8_t> kv(static_cast<size_t>(21 * layout.TokenBytes()));
  (*backend)->ExportKv(first, 21, kv.data());
  (*backend)->ImportKv(second, 21, kv.data());
  std::vector<float> a(static_cast<size_t>(vocab)), b(static_cast<size_t>(vocab));
  for (const auto& [table, out] : {std::pair{&first, &a}, std::pair{&second, &b}}) {
    ForwardBatch step;
    step.tokens = {42};
    step.seqs.push_back({21, 1, table->data()});
    step.logit_rows = {0};
    ASSERT_TRUE((*backend)->Forward(step, out->data(), nullptr).ok());
  }
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
}

}  // namespace
}  // namespace flashroll::engine
