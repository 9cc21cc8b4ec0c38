// Mixture-of-experts models on the CUDA backend: the MoE parity fixtures'
// routing equals transformers' (their logits and greedy tokens are checked
// with the dense ones in cuda_backend_test.cc); on the shipped bf16 MoE
// model the GPU agrees with the CPU engine, a seeded request gives the same
// tokens, logprobs and routing bitwise alone and among 16 others, prefill
// equals decode bitwise, and scoring with the recorded routing replays it
// bitwise while other routing moves the logprobs; exact router ties go to
// the lower expert id, as on the CPU. And the weight bytes
// CudaWeightBytes predicts are the bytes the upload allocates.
//
// Every test skips, saying why, where no usable GPU is present.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/json.h"
#include "engine/device/device_kernels.h"
#include "engine/device/device_memory.h"
#include "engine/models/model.h"
#include "engine/serving/backend.h"
#include "engine/serving/device_logits.h"
#include "engine/serving/engine.h"
#include "engine/serving/generate.h"
#include "tests/cuda/cuda_test_support.h"
#include "tests/engine/checkpoint_fixture.h"
#include "tests/engine/engine_fixture.h"

namespace flashroll::engine {
namespace {

using cuda_testing::Ints;
using cuda_testing::GpuOptions;
using cuda_testing::kGpu;
using cuda_testing::LoadOrDie;
using testing::Prompt;
using testing::SameBits;
using testing::ScoreChoice;

class CudaMoeFixtureTest : public ::testing::TestWithParam<std::string> {};

// Expert ids per layer and position, descending router probability, as
// transformers recorded them (the fixtures' routing gaps are far above the
// f32 error, so no tie decides).
TEST_P(CudaMoeFixtureTest, RoutingMatchesTransformers) {
  SKIP_WITHOUT_GPU();
  const std::string dir = "tests/data/parity/" + GetParam();
  Result<Json> ref = ReadJsonFile(dir + "/reference.json");
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  std::unique_ptr<Model> model = LoadOrDie(dir);
  ASSERT_NE(model, nullptr);
  const RoutingShape shape = model->routing_shape();
  ASSERT_FALSE(shape.empty());
  for (const Json& prompt : (*ref)["prompts"]) {
    const std::vector<int32_t> tokens = Ints(prompt["tokens"]);
    std::vector<int32_t> routed;
    Result<std::vector<float>> logits = DeviceLogits(*model, kGpu, tokens, &routed);
    ASSERT_TRUE(logits.ok()) << logits.status().ToString();
    ASSERT_EQ(routed.size(), tokens.size() * static_cast<size_t>(shape.TokenIds()));
    const Json& want = prompt["routing"];
    int64_t moe_index = 0;
    for (size_t layer = 0; layer < want.size(); ++layer) {
      if (want[layer].empty()) continue;  // a dense layer
      for (size_t pos = 0; pos < tokens.size(); ++pos) {
        const int32_t* ids = &routed[pos * shape.TokenIds() + moe_index * shape.k];
        EXPECT_EQ(std::vector<int32_t>(ids, ids + shape.k), Ints(want[layer][pos]))
            << GetParam() << " layer " << layer << " position " << pos;
      }
      ++moe_index;
    }
    EXPECT_EQ(moe_index, shape.moe_layers);
  }
}

INSTANTIATE_TEST_SUITE_P(MoeFixtures, CudaMoeFixtureTest,
                         ::testing::Values("qwen3_moe", "qwen3_moe_mixed", "qwen2_moe"));

const char kMoeModel[] = "models/default-moe";  // bf16, 6 MoE layers, 8 experts, top-2

// The shipped bf16 MoE model on the GPU (bf16 experts on the tensor cores)
// against the CPU engine: close logits, the same routing and greedy tokens.
TEST(CudaMoeTest, Bf16MoeModelAgreesWithTheCpu) {
  SKIP_WITHOUT_GPU();
  std::unique_ptr<Model> model = LoadOrDie(kMoeModel);
  ASSERT_NE(model, nullptr);
  const std::vector<int32_t> tokens = Prompt(4, 48);
  std::vector<int32_t> gpu_routed, cpu_routed;
  Result<std::vector<float>> gpu = DeviceLogits(*model, kGpu, tokens, &gpu_routed);
  Result<std::vector<float>> cpu = DeviceLogits(*model, DeviceSpec{}, tokens, &cpu_routed);
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  double worst = 0;
  for (size_t i = 0; i < gpu->size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs((*gpu)[i] - (*cpu)[i])));
  std::printf("[ bf16 moe ] %s: max |gpu - cpu| logit = %.3g\n", kMoeModel, worst);
  EXPECT_LE(worst, 5e-3);
  EXPECT_EQ(gpu_routed, cpu_routed);
  GenerateOptions options;
  options.max_tokens = 24;
  const std::vector<int32_t> prompt(tokens.begin(), tokens.begin() + 20);
  Result<std::vector<int32_t>> on_cpu = Generate(*model, prompt, options);
  options.device = kGpu;
  Result<std::vector<int32_t>> on_gpu = Generate(*model, prompt, options);
  ASSERT_TRUE(on_cpu.ok() && on_gpu.ok());
  EXPECT_EQ(*on_gpu, *on_cpu);
}

// Router ties: a copy of the qwen3_moe fixture whose layer-0 router rows are
// all row 0: every token's 8 probabilities are equal to the bit, and top-2
// must take experts 0 then 1 (ties to the lower id), as the CPU does.
TEST(CudaMoeTest, RouterTiesGoToTheLowerExpertId) {
  SKIP_WITHOUT_GPU();
  testing::TempDir dir;
  const std::string copy = dir.path() + "/tied-router";
  testing::CopyCheckpoint("tests/data/parity/qwen3_moe", copy);
  std::string bytes = testing::ReadWholeFile(copy + "/model.safetensors");
  uint64_t len = 0;
  std::memcpy(&len, bytes.data(), 8);
  Result<Json> header = ParseJson(std::string_view(bytes).substr(8, len));
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  const Json& router = (*header)["model.layers.0.mlp.gate.weight"];
  ASSERT_EQ(router["dtype"], "F32");
  const int64_t hidden = router["shape"][1].get<int64_t>();
  float* rows = reinterpret_cast<float*>(bytes.data() + 8 + len + router["data_offsets"][0].get<size_t>());
  const int64_t experts = router["shape"][0].get<int64_t>();
  for (int64_t e = 1; e < experts; ++e) std::memcpy(rows + e * hidden, rows, static_cast<size_t>(hidden) * sizeof(float));
  testing::WriteWholeFile(copy + "/model.safetensors", bytes);
  std::unique_ptr<Model> model = LoadOrDie(copy);
  ASSERT_NE(model, nullptr);
  std::vector<int32_t> tokens;  // below the fixture's vocabulary of 300
  for (int32_t i = 0; i < 30; ++i) tokens.push_back(3 + (i * 104729) % 290);
  std::vector<int32_t> gpu, cpu;
  Result<std::vector<float>> on_gpu = DeviceLogits(*model, kGpu, tokens, &gpu);
  ASSERT_TRUE(on_gpu.ok()) << on_gpu.status().ToString();
  Result<std::vector<float>> on_cpu = DeviceLogits(*model, DeviceSpec{}, tokens, &cpu);
  ASSERT_TRUE(on_cpu.ok()) << on_cpu.status().ToString();
  // Layer 0 only: layer 1's router is the fixture's own, and its near-ties
  // on these tokens may fall either way between two summation orders.
  const int64_t per_token = model->routing_shape().TokenIds();
  for (size_t t = 0; t < tokens.size(); ++t) {
    const auto layer0 = [&](const std::vector<int32_t>& ids) {
      return std::vector<int32_t>(ids.begin() + t * per_token, ids.begin() + t * per_token + 2);
    };
    EXPECT_EQ(layer0(gpu), (std::vector<int32_t>{0, 1})) << "position " << t;
    EXPECT_EQ(layer0(cpu), (std::vector<int32_t>{0, 1})) << "position " << t;
  }
}

GenerationRequest WithRouting(GenerationRequest r) {
  r.return_routing = true;
  r.return_prompt_routing = true;
  return r;
}

void ExpectSameChoice(const Choice& a, const Choice& b) {
  ASSERT_EQ(a.tokens, b.tokens);
  ASSERT_EQ(a.samples.size(), b.samples.size());
  for (size_t i = 0; i < a.samples.size(); ++i) {
    ASSERT_TRUE(SameBits(a.samples[i].logprob, b.samples[i].logprob)) << "token " << i;
  }
  EXPECT_EQ(a.prompt_routing, b.prompt_routing);
  EXPECT_EQ(a.routing, b.routing);
}

TEST(CudaMoeTest, SeededRequestIsBitwiseTheSameAloneAndAmong16) {
  SKIP_WITHOUT_GPU();
  std::unique_ptr<Model> model = LoadOrDie(kMoeModel);
  ASSERT_NE(model, nullptr);
  const GenerationRequest probe = WithRouting(testing::Sampled(Prompt(5, 37), 20, 1234));
  Choice alone;
  {
    auto engine = Engine::Start(*model, nullptr, GpuOptions());
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    auto out = (*engine)->Generate(probe);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    alone = (*out)[0];
  }
  ASSERT_EQ(alone.tokens.size(), 20u);
  ASSERT_EQ(alone.routing.size(), 20u);
  EngineOptions options = GpuOptions();
  options.max_batch_tokens = 64;  // prefills split into chunks that mix with decodes
  auto engine = Engine::Start(*model, nullptr, options);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  std::vector<std::shared_ptr<RequestStream>> others;
  for (int i = 0; i < 8; ++i) {
    others.push_back(*(*engine)->Submit(testing::Sampled(Prompt(100 + i, 20 + 13 * i), 30, i)));
  }
  auto probe_stream = (*engine)->Submit(probe);
  ASSERT_TRUE(probe_stream.ok());
  for (int i = 8; i < 16; ++i) {
    others.push_back(*(*engine)->Submit(testing::Sampled(Prompt(100 + i, 50 + 7 * i), 10, i)));
  }
  const std::vector<Choice> batched = (*probe_stream)->Collect();
  for (auto& s : others) s->Collect();
  ExpectSameChoice(alone, batched[0]);
}

// Every position's logits and experts bitwise the same in one prefill pass
// and as decode steps through the paged KV.
TEST(CudaMoeTest, PrefillEqualsDecodeBitwise) {
  SKIP_WITHOUT_GPU();
  std::unique_ptr<Model> model = LoadOrDie(kMoeModel);
  ASSERT_NE(model, nullptr);
  const std::vector<int32_t> tokens = Prompt(9, 40);
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t vocab = model->config().vocab_size;
  const int64_t per_token = model->routing_shape().TokenIds();
  std::vector<int32_t> whole_routed;
  Result<std::vector<float>> whole = DeviceLogits(*model, kGpu, tokens, &whole_routed);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  auto backend = NewCudaBackend(*model, kGpu);
  ASSERT_TRUE(backend.ok()) << backend.status().ToString();
  ASSERT_TRUE((*backend)->AllocateKv(model->KvLayoutFor(16, KvDType::kF32), 8).ok());
  const std::vector<int32_t> table = {5, 2, 7};
  std::vector<float> step(static_cast<size_t>(vocab));
  std::vector<int32_t> routed;
  for (int64_t t = 0; t < n; ++t) {
    ForwardBatch batch;
    batch.tokens = {tokens[t]};
    batch.seqs.push_back({t, 1, table.data()});
    batch.logit_rows = {0};
    ASSERT_TRUE((*backend)->Forward(batch, step.data(), &routed).ok());
    ASSERT_EQ(0, std::memcmp(step.data(), whole->data() + t * vocab, vocab * sizeof(float))) << "position " << t;
    ASSERT_EQ(routed, std::vector<int32_t>(whole_routed.begin() + t * per_token,
                                           whole_routed.begin() + (t + 1) * per_token))
        << "position " << t;
  }
}

std::vector<int32_t> Flat(const Choice& c) {
  std::vector<int32_t> flat;
  for (const auto* part : {&c.prompt_routing, &c.routing}) {
    for (const auto& ids : *part) flat.insert(flat.end(), ids.begin(), ids.end());
  }
  return flat;
}

// Routing replay on the GPU: scoring a generation with the routing it
// recorded gives its logprobs bitwise; sending one token elsewhere moves
// the logprobs after it and none before.
TEST(CudaMoeTest, ScoringWithTheRecordedRoutingReplaysItBitwise) {
  SKIP_WITHOUT_GPU();
  std::unique_ptr<Model> model = LoadOrDie(kMoeModel);
  ASSERT_NE(model, nullptr);
  EngineOptions o = GpuOptions();
  o.max_batch_tokens = 64;
  auto engine = Engine::Start(*model, nullptr, o);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  const GenerationRequest r = WithRouting(testing::Sampled(Prompt(6, 70), 40, 12));
  auto gen = (*engine)->Generate(r);
  ASSERT_TRUE(gen.ok()) << gen.status().ToString();
  const Choice& c = (*gen)[0];
  const int64_t per_token = model->routing_shape().TokenIds();
  const std::vector<int32_t> routing = Flat(c);
  ASSERT_EQ(routing.size(), (r.prompt.size() + c.tokens.size() - 1) * per_token);
  const std::vector<float> replayed = ScoreChoice(**engine, r, c, routing);
  ASSERT_EQ(replayed.size(), c.tokens.size());
  for (size_t t = 0; t < replayed.size(); ++t) ASSERT_TRUE(SameBits(replayed[t], c.samples[t].logprob)) << t;

  const size_t moved = r.prompt.size() + 4;  // the token after generated token 4, first MoE layer
  std::vector<int32_t> other = routing;
  int32_t* ids = &other[moved * per_token];
  for (int32_t e = 0; e < model->routing_shape().num_experts; ++e) {
    if (e != ids[0] && e != ids[1]) {
      ids[1] = e;
      break;
    }
  }
  const std::vector<float> diverted = ScoreChoice(**engine, r, c, other);
  ASSERT_EQ(diverted.size(), c.tokens.size());
  for (size_t t = 0; t <= 4; ++t) EXPECT_TRUE(SameBits(diverted[t], c.samples[t].logprob)) << t;
  EXPECT_FALSE(SameBits(diverted[5], c.samples[5].logprob));
}

// CudaWeightBytes (device_memory.h, from the tensor index alone) is what
// the upload really allocates: dense and MoE, f32 and bf16, tied or not, a
// shared expert with its gate.
TEST(CudaWeightBytesTest, EqualsTheUploadsBytes) {
  SKIP_WITHOUT_GPU();
  for (const char* path :
       {"models/default", "models/default-moe", "tests/data/parity/llama", "tests/data/parity/llama3_tied",
        "tests/data/parity/qwen2", "tests/data/parity/qwen3", "tests/data/parity/qwen3_moe",
        "tests/data/parity/qwen3_moe_mixed", "tests/data/parity/qwen2_moe"}) {
    std::unique_ptr<Model> model = LoadOrDie(path);
    ASSERT_NE(model, nullptr);
    Result<int64_t> uploaded = DeviceUploadedWeightBytes(kGpu, *model);
    ASSERT_TRUE(uploaded.ok()) << path << ": " << uploaded.status().ToString();
    EXPECT_EQ(CudaWeightBytes(model->files()), *uploaded) << path;
  }
}

}  // namespace
}  // namespace flashroll::engine
