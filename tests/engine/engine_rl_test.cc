// The engine's RL features on both shipped models (dense and MoE): scoring
// gives every token bitwise the logprob generation recorded for it, whatever
// the batches on either side; a sequence paused at a token boundary and
// resumed continues bitwise as if never paused.
#include <algorithm>
#include <thread>

#include <gtest/gtest.h>

#include "engine/models/model.h"
#include "engine/serving/engine.h"
#include "tests/engine/engine_fixture.h"

namespace flashroll::engine {
namespace {

using testing::LoadShipped;
using testing::Prompt;
using testing::SameBits;
using testing::SampledWithTopLogprobs;
using testing::StartEngine;



class EngineRlTest : public ::testing::TestWithParam<const char*> {};

TEST_P(EngineRlTest, ScoringEqualsGenerationBitwise) {
  const Model& model = LoadShipped(GetParam());
  auto engine = StartEngine(model);
  // Generate 16 samples together (and the first again alone).
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 16; ++i) requests.push_back(SampledWithTopLogprobs(Prompt(i, 20 + 5 * i), 64, 100 + i));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (auto& r : requests) streams.push_back(*engine->Submit(r));
  std::vector<Choice> generated;
  for (auto& s : streams) generated.push_back(s->Collect()[0]);
  auto alone = engine->Generate(requests[0]);
  ASSERT_TRUE(alone.ok());
  ASSERT_EQ((*alone)[0].tokens, generated[0].tokens);
  // Score them one at a time, then eight at a time.
  for (int batch : {1, 8}) {
    int64_t checked = 0;
    for (int first = 0; first < 16; first += batch) {
      std::vector<std::shared_ptr<RequestStream>> scoring;
      for (int i = first; i < first + batch; ++i) {
        GenerationRequest s;
        s.prompt = requests[i].prompt;
        s.score_tokens = generated[i].tokens;
        s.max_tokens = 0;
        s.sampling.temperature = 0.9;
        s.sampling.top_logprobs = 3;
        auto stream = engine->Submit(s);
        ASSERT_TRUE(stream.ok()) << stream.status().ToString();
        scoring.push_back(*stream);
      }
      for (int i = first; i < first + batch; ++i) {
        const Choice scored = scoring[i - first]->Collect()[0];
        ASSERT_EQ(scored.tokens, generated[i].tokens) << "sample " << i;
        for (size_t t = 0; t < scored.samples.size(); ++t) {
          const SampledToken& a = scored.samples[t];
          const SampledToken& b = generated[i].samples[t];
          ASSERT_TRUE(SameBits(a.logprob, b.logprob)) << "sample " << i << " token " << t << ": " << a.logprob
                                                      << " vs " << b.logprob << " (batch " << batch << ")";
          ASSERT_EQ(a.top.size(), b.top.size());
          for (size_t j = 0; j < a.top.size(); ++j) {
            ASSERT_EQ(a.top[j].token, b.top[j].token);
            ASSERT_TRUE(SameBits(a.top[j].logprob, b.top[j].logprob));
          }
          ++checked;
        }
      }
    }
    EXPECT_EQ(checked, 16 * 64);
  }
}

TEST_P(EngineRlTest, FullVocabularyScoresAreTheLogSoftmax) {
  const Model& model = LoadShipped(GetParam());
  auto engine = StartEngine(model);
  GenerationRequest s;
  s.prompt = Prompt(1, 10);
  s.score_tokens = {5, 6, 7};
  s.max_tokens = 0;
  s.score_full_vocab = true;
  s.sampling.temperature = 1;
  auto stream = engine->Submit(s);
  ASSERT_TRUE(stream.ok());
  int events = 0;
  while (auto e = (*stream)->Next()) {
    if (!e->has_token) continue;
    ASSERT_EQ(static_cast<int64_t>(e->vocab_logprobs.size()), model.config().vocab_size);
    double total = 0;
    for (float lp : e->vocab_logprobs) total += std::exp(static_cast<double>(lp));
    EXPECT_NEAR(total, 1.0, 1e-4);
    EXPECT_TRUE(SameBits(e->vocab_logprobs[s.score_tokens[events]], e->token.logprob));
    ++events;
  }
  EXPECT_EQ(events, 3);
}

TEST_P(EngineRlTest, PausedSequenceResumesBitwiseAsIfNeverPaused) {
  const Model& model = LoadShipped(GetParam());
  auto engine = StartEngine(model);
  const GenerationRequest probe = SampledWithTopLogprobs(Prompt(7, 33), 40, 9);
  auto straight = engine->Generate(probe);
  ASSERT_TRUE(straight.ok());

  auto stream = engine->Submit(probe);
  ASSERT_TRUE(stream.ok());
  Choice resumed;
  uint64_t id = 0;
  for (int i = 0; i < 5; ++i) {
    auto e = (*stream)->Next();
    ASSERT_TRUE(e && e->has_token);
    id = e->sequence_id;
    ASSERT_NE(id, 0u);  // 0 means "no sequence yet"
    resumed.tokens.push_back(e->token.token);
    resumed.samples.push_back(e->token);
  }
  ASSERT_TRUE(engine->Pause(id).ok());
  auto info = engine->GetSequence(id);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->state, "paused");
  EXPECT_GT(info->kv_blocks, 0);
  // Other work runs while it waits; it does not advance and keeps its blocks.
  auto other = engine->Generate(SampledWithTopLogprobs(Prompt(8, 50), 30, 1));
  ASSERT_TRUE(other.ok());
  auto again = engine->GetSequence(id);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->generated_tokens, info->generated_tokens);
  EXPECT_EQ(again->kv_blocks, info->kv_blocks);
  EXPECT_EQ(engine->Pause(id).code(), Code::kFailedPrecondition);
  ASSERT_TRUE(engine->Resume(id).ok());
  EXPECT_EQ(engine->Resume(id).code(), Code::kFailedPrecondition);
  while (auto e = (*stream)->Next()) {
    if (!e->has_token) continue;
    resumed.tokens.push_back(e->token.token);
    resumed.samples.push_back(e->token);
  }
  ASSERT_EQ(resumed.tokens, (*straight)[0].tokens);
  for (size_t t = 0; t < resumed.samples.size(); ++t) {
    ASSERT_TRUE(SameBits(resumed.samples[t].logprob, (*straight)[0].samples[t].logprob)) << t;
  }
  EXPECT_EQ(engine->Pause(id).code(), Code::kNotFound);  // finished
  EXPECT_EQ(engine->GetSequence(424242).status().code(), Code::kNotFound);
  EXPECT_EQ(engine->Resume(424242).code(), Code::kNotFound);
}

TEST_P(EngineRlTest, ScoringRequestsAreValidated) {
  auto engine = StartEngine(LoadShipped(GetParam()));
  GenerationRequest s;
  s.prompt = {1, 2};
  s.max_tokens = 0;
  s.score_tokens = {3, 1 << 20};
  auto r = engine->Submit(s);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("token_ids: token 1048576 at position 1"), std::string::npos);
  s.score_tokens = {3};
  s.n = 2;
  EXPECT_FALSE(engine->Submit(s).ok());
  s.n = 1;
  s.max_tokens = 4;
  EXPECT_FALSE(engine->Submit(s).ok());
  s.max_tokens = 0;
  s.score_tokens.assign(5000, 3);
  r = engine->Submit(s);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("exceeds the context"), std::string::npos);
}

TEST_P(EngineRlTest, SwappingToTheSameWeightsChangesNothingButTheVersion) {
  const Model& model = LoadShipped(GetParam());
  auto engine = StartEngine(model);
  const GenerationRequest probe = SampledWithTopLogprobs(Prompt(3, 40), 48, 21);
  auto straight = engine->Generate(probe);
  ASSERT_TRUE(straight.ok());
  EXPECT_EQ((*straight)[0].versions, std::vector<int64_t>(48, 0));

  auto stream = engine->Submit(probe);
  ASSERT_TRUE(stream.ok());
  Choice swapped;
  for (int i = 0; i < 8; ++i) {
    auto e = (*stream)->Next();
    ASSERT_TRUE(e && e->has_token);
    swapped.tokens.push_back(e->token.token);
    swapped.samples.push_back(e->token);
    swapped.versions.push_back(e->version);
  }
  auto same = Model::Load(std::string("models/") + GetParam());
  ASSERT_TRUE(same.ok());
  ASSERT_TRUE(engine->SwapWeights(std::move(*same), 1).ok());
  EXPECT_EQ(engine->weight_version(), 1);
  while (auto e = (*stream)->Next()) {
    if (!e->has_token) continue;
    swapped.tokens.push_back(e->token.token);
    swapped.samples.push_back(e->token);
    swapped.versions.push_back(e->version);
  }
  ASSERT_EQ(swapped.tokens, (*straight)[0].tokens);
  for (size_t t = 0; t < swapped.samples.size(); ++t) {
    ASSERT_TRUE(SameBits(swapped.samples[t].logprob, (*straight)[0].samples[t].logprob)) << t;
  }
  // Each token records the version that produced it: 0 up to the swap, then 1.
  EXPECT_EQ(swapped.versions.front(), 0);
  EXPECT_EQ(swapped.versions.back(), 1);
  EXPECT_TRUE(std::is_sorted(swapped.versions.begin(), swapped.versions.end()));
  // Blocks written by version 0 are not reused for new requests.
  const int64_t hits = engine->Stats().prefix_hit_tokens;
  ASSERT_TRUE(engine->Generate(probe).ok());
  EXPECT_EQ(engine->Stats().prefix_hit_tokens, hits);
}

TEST_P(EngineRlTest, RefusesWeightsOfAnotherShapeOrAnOlderVersion) {
  auto engine = StartEngine(LoadShipped(GetParam()));
  const std::string other = std::string(GetParam()) == "default" ? "default-moe" : "default";
  auto wrong = Model::Load("models/" + other);
  ASSERT_TRUE(wrong.ok());
  Status st = engine->SwapWeights(std::move(*wrong), 5);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  // The two shipped models differ first in model_type (qwen3 vs qwen3_moe).
  EXPECT_NE(st.message().find("config.json: model_type: "), std::string::npos) << st.ToString();
  EXPECT_EQ(engine->weight_version(), 0);
  EXPECT_EQ(engine->SwapWeights(nullptr, 6).code(), Code::kInvalidArgument);
  auto same = Model::Load(std::string("models/") + GetParam());
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(engine->SwapWeights(std::move(*same), 0).code(), Code::kFailedPrecondition);
  auto out = engine->Generate(SampledWithTopLogprobs(Prompt(1, 10), 4, 1));  // the old weights keep serving
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0].versions, std::vector<int64_t>(4, 0));
}

INSTANTIATE_TEST_SUITE_P(Models, EngineRlTest, ::testing::Values("default", "default-moe"));

}  // namespace
}  // namespace flashroll::engine
