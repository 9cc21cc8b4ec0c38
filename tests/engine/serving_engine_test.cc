// The serving engine on the shipped default model: batching, paged KV with
// copy-on-write forks, prefix caching, preemption, limits and cancellation —
// and exactness: a seeded request gives the same tokens and bitwise-identical
// logprobs alone, among 16 others, with any thread count, in prefill or decode.
#include <cstring>
#include <thread>

#include <gtest/gtest.h>

#include "engine/kernels/cpu_threads.h"
#include "engine/models/model.h"
#include "engine/serving/engine.h"
#include "tests/engine/engine_fixture.h"

namespace flashroll::engine {
namespace {

const Model& DefaultModel() {
  static const Model* model = [] {
    auto m = Model::Load("models/default");
    if (!m.ok()) {
      ADD_FAILURE() << m.status().ToString();
      std::abort();
    }
    return m->release();
  }();
  return *model;
}

using testing::Prompt;

EngineOptions TestOptions() {
  EngineOptions o;
  o.kv_memory_bytes = 64 << 20;
  return o;
}

// Stats are published after each step; wait for the step that ended the last request.
void WaitForBlocksUsed(Engine* engine, int64_t expected) {
  for (int i = 0; i < 400 && engine->Stats().kv_blocks_used != expected; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::unique_ptr<Engine> StartEngine(EngineOptions options = TestOptions()) {
  auto e = Engine::Start(DefaultModel(), nullptr, options);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return std::move(*e);
}

using testing::Sampled;

void ExpectSameBits(const Choice& a, const Choice& b) {
  ASSERT_EQ(a.tokens, b.tokens);
  for (size_t i = 0; i < a.samples.size(); ++i) {
    ASSERT_EQ(0, std::memcmp(&a.samples[i].logprob, &b.samples[i].logprob, sizeof(float))) << "token " << i;
  }
}

// The greedy path through the engine equals a plain loop over Model::Forward.
TEST(ServingEngineTest, GreedyMatchesTheSingleSequenceForward) {
  EngineOptions options = TestOptions();
  options.kv_dtype = KvDType::kF32;
  auto engine = StartEngine(options);
  GenerationRequest r;
  r.prompt = Prompt(1, 40);
  r.max_tokens = 12;
  r.ignore_eos = true;
  r.sampling.temperature = 0;
  auto out = engine->Generate(r);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const Model& m = DefaultModel();
  KvCache cache = m.NewCache();
  std::vector<float> logits;
  std::vector<int32_t> next = r.prompt, expected;
  for (int i = 0; i < 12; ++i) {
    ASSERT_TRUE(m.Forward(next, &cache, false, &logits).ok());
    const int32_t tok = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    expected.push_back(tok);
    next = {tok};
  }
  EXPECT_EQ((*out)[0].tokens, expected);
  EXPECT_EQ((*out)[0].finish, FinishReason::kLength);
}

TEST(ServingEngineTest, SeededRequestIsBitwiseTheSameAloneAndAmong16) {
  const GenerationRequest probe = Sampled(Prompt(5, 37), 20, 1234);
  Choice alone;
  {
    EngineOptions options = TestOptions();
    options.threads = 1;
    auto engine = StartEngine(options);
    auto out = engine->Generate(probe);
    ASSERT_TRUE(out.ok());
    alone = (*out)[0];
  }
  ASSERT_EQ(alone.tokens.size(), 20u);
  EngineOptions options = TestOptions();
  options.threads = 2;
  options.max_batch_tokens = 64;  // prefills split into chunks that mix with decodes
  auto engine = StartEngine(options);
  std::vector<std::shared_ptr<RequestStream>> others;
  for (int i = 0; i < 8; ++i) others.push_back(*engine->Submit(Sampled(Prompt(100 + i, 20 + 13 * i), 30, i)));
  auto probe_stream = engine->Submit(probe);
  ASSERT_TRUE(probe_stream.ok());
  for (int i = 8; i < 16; ++i) others.push_back(*engine->Submit(Sampled(Prompt(100 + i, 50 + 7 * i), 10, i)));
  const std::vector<Choice> batched = (*probe_stream)->Collect();
  for (auto& s : others) s->Collect();
  ExpectSameBits(alone, batched[0]);
}

// A token's logprob is the same whether its position ran in a prefill chunk
// or as a decode step.
TEST(ServingEngineTest, PrefillEqualsDecodeBitwise) {
  auto engine = StartEngine();
  GenerationRequest r;
  r.prompt = Prompt(9, 30);
  r.max_tokens = 10;
  r.ignore_eos = true;
  r.sampling.temperature = 0;
  auto first = engine->Generate(r);
  ASSERT_TRUE(first.ok());
  GenerationRequest again = r;
  again.prompt.insert(again.prompt.end(), (*first)[0].tokens.begin(), (*first)[0].tokens.begin() + 6);
  again.max_tokens = 4;
  auto second = engine->Generate(again);
  ASSERT_TRUE(second.ok());
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ((*second)[0].tokens[i], (*first)[0].tokens[6 + i]);
    EXPECT_EQ(0, std::memcmp(&(*second)[0].samples[i].logprob, &(*first)[0].samples[6 + i].logprob, 4)) << i;
  }
}

TEST(ServingEngineTest, ChoicesForkFromOnePrefillDifferAndReproduce) {
  auto engine = StartEngine();
  GenerationRequest r = Sampled(Prompt(3, 45), 16, 77);
  r.sampling.temperature = 1.5;
  r.n = 4;
  auto a = engine->Generate(r);
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(a->size(), 4u);
  EXPECT_NE((*a)[0].tokens, (*a)[1].tokens);
  EXPECT_NE((*a)[2].tokens, (*a)[3].tokens);
  const EngineStats stats = engine->Stats();
  // One prefill of 45 prompt tokens served all four choices.
  EXPECT_LT(stats.prompt_tokens, 2 * 45 + 4 * 16);
  EngineOptions no_cache = TestOptions();
  no_cache.prefix_caching = false;
  auto other = StartEngine(no_cache);
  auto b = other->Generate(r);
  ASSERT_TRUE(b.ok());
  for (int c = 0; c < 4; ++c) ExpectSameBits((*a)[c], (*b)[c]);
}

TEST(ServingEngineTest, PrefixCacheHitsAndGivesTheSameResult) {
  auto engine = StartEngine();
  GenerationRequest r = Sampled(Prompt(4, 70), 8, 5);
  auto first = engine->Generate(r);
  ASSERT_TRUE(first.ok());
  const int64_t hits_before = engine->Stats().prefix_hit_tokens;
  auto second = engine->Generate(r);
  ASSERT_TRUE(second.ok());
  EXPECT_GE(engine->Stats().prefix_hit_tokens - hits_before, 64);
  ExpectSameBits((*first)[0], (*second)[0]);
}

TEST(ServingEngineTest, PreemptsWhenKvRunsShortAndStaysExact) {
  EngineOptions small = TestOptions();
  small.block_size = 16;
  small.kv_memory_bytes = 10 * DefaultModel().KvLayoutFor(16, KvDType::kBF16).BlockBytes();
  small.prefix_caching = false;
  auto engine = StartEngine(small);
  std::vector<GenerationRequest> requests;
  // Three sequences of 5 blocks each share 10 blocks.
  for (int i = 0; i < 3; ++i) requests.push_back(Sampled(Prompt(20 + i, 40), 40, i));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (auto& r : requests) streams.push_back(*engine->Submit(r));
  std::vector<Choice> together;
  for (auto& s : streams) together.push_back(s->Collect()[0]);
  EXPECT_GT(engine->Stats().preemptions, 0);
  for (int i = 0; i < 3; ++i) {
    auto alone = engine->Generate(requests[i]);
    ASSERT_TRUE(alone.ok());
    ASSERT_EQ(together[i].tokens.size(), 40u);
    ExpectSameBits(together[i], (*alone)[0]);
  }
  WaitForBlocksUsed(engine.get(), 0);
  EXPECT_EQ(engine->Stats().kv_blocks_used, 0);
}

TEST(ServingEngineTest, RefusesWhatCannotFit) {
  auto engine = StartEngine();
  GenerationRequest r;
  r.prompt = Prompt(1, 4000);
  r.max_tokens = 200;
  auto s = engine->Submit(r);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("exceeds the context of 4096 tokens"), std::string::npos) << s.status().ToString();
  r.prompt = {1, 2, 2487};
  r.max_tokens = 1;
  s = engine->Submit(r);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("position 2"), std::string::npos) << s.status().ToString();
  r.prompt = {1};
  r.max_tokens = -1;
  EXPECT_FALSE(engine->Submit(r).ok());
  r.max_tokens = 1;
  r.n = 0;
  EXPECT_FALSE(engine->Submit(r).ok());
  EngineOptions tiny = TestOptions();
  tiny.kv_memory_bytes = 4 * DefaultModel().KvLayoutFor(16, KvDType::kBF16).BlockBytes();
  auto small = StartEngine(tiny);
  r.n = 1;
  r.prompt = Prompt(2, 60);
  r.max_tokens = 10;
  s = small->Submit(r);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("exceeds the KV cache of 64 tokens"), std::string::npos);
}

TEST(ServingEngineTest, CancelFreesBlocksAtOnce) {
  EngineOptions options = TestOptions();
  options.prefix_caching = false;
  auto engine = StartEngine(options);
  auto stream = engine->Submit(Sampled(Prompt(8, 100), 3000, 1));
  ASSERT_TRUE(stream.ok());
  ASSERT_TRUE((*stream)->Next().has_value());
  // Stats are published after the step that sent the token: wait for them.
  for (int i = 0; i < 400 && engine->Stats().kv_blocks_used == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GT(engine->Stats().kv_blocks_used, 0);
  stream->reset();  // the consumer goes away
  WaitForBlocksUsed(engine.get(), 0);
  EXPECT_EQ(engine->Stats().kv_blocks_used, 0);
  EXPECT_EQ(engine->Stats().running, 0);
}

TEST(ServingEngineTest, StopTokensAndZeroMaxTokens) {
  auto engine = StartEngine();
  GenerationRequest r;
  r.prompt = Prompt(6, 20);
  r.max_tokens = 8;
  r.ignore_eos = true;
  r.sampling.temperature = 0;
  auto free_run = engine->Generate(r);
  ASSERT_TRUE(free_run.ok());
  r.stop_tokens = {(*free_run)[0].tokens[2]};
  auto stopped = engine->Generate(r);
  ASSERT_TRUE(stopped.ok());
  const auto& t = (*stopped)[0].tokens;
  const size_t first = std::find(t.begin(), t.end(), r.stop_tokens[0]) - t.begin();
  EXPECT_EQ(t.size(), first + 1);
  EXPECT_EQ((*stopped)[0].finish, FinishReason::kStop);
  r.max_tokens = 0;
  auto none = engine->Generate(r);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE((*none)[0].tokens.empty());
  EXPECT_EQ((*none)[0].finish, FinishReason::kLength);
}

}  // namespace
}  // namespace flashroll::engine
