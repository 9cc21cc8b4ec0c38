// Per-token MoE routing in the serving engine: every token a MoE sequence
// computes keeps the experts it used (recorded once, compact), returned to
// callers on request, carried through forks, the prefix cache, preemption
// and pauses to disk.
#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <map>

#include <gtest/gtest.h>

#include "engine/models/model.h"
#include "engine/serving/engine.h"
#include "tests/engine/checkpoint_fixture.h"
#include "tests/engine/engine_fixture.h"

namespace flashroll::engine {
namespace {

using testing::ScoreChoice;

using testing::LoadShipped;
using testing::Prompt;

// engine_fixture.h's sampled request, returning its routing.
GenerationRequest RoutedSample(std::vector<int32_t> prompt, int64_t max_tokens, uint64_t seed) {
  GenerationRequest r = testing::Sampled(std::move(prompt), max_tokens, seed);
  r.return_routing = true;
  r.return_prompt_routing = true;
  return r;
}

// F32 KV, as Model::Forward's reference cache, so the reference routing is
// bitwise the engine's.
std::unique_ptr<Engine> StartF32KvEngine(const Model& model, EngineOptions o = {}) {
  o.kv_dtype = KvDType::kF32;
  return testing::StartEngine(model, o);
}

// The routing a single-sequence forward pass gives `tokens`, as the engine
// reports it: [token][moe_layer * k].
std::vector<std::vector<int32_t>> ReferenceRouting(const Model& model, const std::vector<int32_t>& tokens) {
  KvCache cache = model.NewCache();
  std::vector<float> logits;
  Routing routing;
  EXPECT_TRUE(model.Forward(tokens, &cache, false, &logits, &routing).ok());
  std::vector<std::vector<int32_t>> out(tokens.size());
  for (const auto& layer : routing) {
    for (size_t t = 0; t < layer.size(); ++t) out[t].insert(out[t].end(), layer[t].begin(), layer[t].end());
  }
  return out;
}

// Prompt routing then each generated token's: every computed token in order.
std::vector<std::vector<int32_t>> AllRouting(const Choice& c) {
  std::vector<std::vector<int32_t>> all = c.prompt_routing;
  all.insert(all.end(), c.routing.begin(), c.routing.end());
  return all;
}

// Every computed token (the prompt and each generated token but the last).
std::vector<int32_t> Computed(const GenerationRequest& r, const Choice& c) {
  std::vector<int32_t> t = r.prompt;
  t.insert(t.end(), c.tokens.begin(), c.tokens.end() - 1);
  return t;
}

TEST(EngineRoutingTest, EveryComputedTokenKeepsTheExpertsItUsed) {
  const Model& model = LoadShipped("default-moe");
  const RoutingShape shape = model.routing_shape();
  ASSERT_EQ(shape.moe_layers, 6);
  ASSERT_EQ(shape.k, 2);
  ASSERT_EQ(shape.IdBytes(), 1);  // 8 experts: one byte an id
  auto engine = StartF32KvEngine(model);
  GenerationRequest r = RoutedSample(Prompt(3, 45), 12, 5);
  r.n = 3;  // forks share the prompt's routing
  auto out = engine->Generate(r);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  for (const Choice& c : *out) {
    ASSERT_EQ(c.prompt_routing.size(), r.prompt.size() - 1);
    ASSERT_EQ(c.routing.size(), c.tokens.size());
    for (const auto& ids : AllRouting(c)) ASSERT_EQ(ids.size(), 12u);
    EXPECT_EQ(AllRouting(c), ReferenceRouting(model, Computed(r, c)));
  }
  // Again: the prompt's full blocks now come from the prefix cache, and
  // their routing with them.
  const int64_t hits = engine->Stats().prefix_hit_tokens;
  auto again = engine->Generate(r);
  ASSERT_TRUE(again.ok());
  EXPECT_GT(engine->Stats().prefix_hit_tokens, hits);
  for (size_t c = 0; c < again->size(); ++c) EXPECT_EQ(AllRouting((*again)[c]), AllRouting((*out)[c]));
}

TEST(EngineRoutingTest, PreemptedSequencesKeepTheirRouting) {
  const Model& model = LoadShipped("default-moe");
  EngineOptions o;
  o.kv_memory_bytes = 12 * model.KvLayoutFor(16, KvDType::kF32).BlockBytes();  // 12 blocks for 4 x ~60 tokens
  o.prefix_caching = false;
  auto engine = StartF32KvEngine(model, o);
  std::vector<GenerationRequest> reqs;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 4; ++i) {
    reqs.push_back(RoutedSample(Prompt(10 + i, 30), 30, static_cast<uint64_t>(i)));
    auto s = engine->Submit(reqs.back());
    ASSERT_TRUE(s.ok());
    streams.push_back(*s);
  }
  for (int i = 0; i < 4; ++i) {
    const std::vector<Choice> c = streams[i]->Collect();
    EXPECT_EQ(AllRouting(c[0]), ReferenceRouting(model, Computed(reqs[i], c[0]))) << i;
  }
  EXPECT_GT(engine->Stats().preemptions, 0);
}

TEST(EngineRoutingTest, DenseModelsHaveNoRouting) {
  const Model& model = LoadShipped("default");
  EXPECT_TRUE(model.routing_shape().empty());
  auto engine = StartF32KvEngine(model);
  GenerationRequest r = RoutedSample(Prompt(1, 10), 4, 1);
  auto refused = engine->Submit(r);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(refused.status().message().rfind("return_routing: ", 0), 0u) << refused.status().ToString();
  r.return_routing = false;
  refused = engine->Submit(r);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message().rfind("return_prompt_routing: ", 0), 0u);
  r.return_prompt_routing = false;
  auto out = engine->Generate(r);
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE((*out)[0].routing.empty());
}

TEST(EngineRoutingTest, RoutingSurvivesAPauseToDisk) {
  const Model& model = LoadShipped("default-moe");
  std::string dir = ::testing::TempDir() + "routing_XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  EngineOptions o;
  o.persist_dir = dir;
  auto engine = StartF32KvEngine(model, o);
  const GenerationRequest r = RoutedSample(Prompt(4, 37), 120, 8);  // long enough for the pause to land before its end
  auto straight = engine->Generate(r);
  ASSERT_TRUE(straight.ok());
  auto stream = engine->Submit(r);
  ASSERT_TRUE(stream.ok());
  Choice c;
  uint64_t id = 0;
  while (c.tokens.size() < 6) {
    auto e = (*stream)->Next();
    ASSERT_TRUE(e && e->has_token);
    id = e->sequence_id;
    c.tokens.push_back(e->token.token);
    c.routing.push_back(e->routing);
    if (!e->prompt_routing.empty()) c.prompt_routing = e->prompt_routing;
  }
  ASSERT_TRUE(engine->Pause(id, {.to_disk = true}).ok());
  ASSERT_TRUE(engine->Resume(id).ok());
  while (auto e = (*stream)->Next()) {
    if (!e->has_token) continue;
    c.tokens.push_back(e->token.token);
    c.routing.push_back(e->routing);
  }
  EXPECT_EQ(c.tokens, (*straight)[0].tokens);
  EXPECT_EQ(AllRouting(c), AllRouting((*straight)[0]));
  engine.reset();
  ::rmdir(dir.c_str());
}

using testing::SameBits;

// The flat [token][moe_layer][k] form score_routing takes.
std::vector<int32_t> Flat(const std::vector<std::vector<int32_t>>& routing) {
  std::vector<int32_t> flat;
  for (const auto& ids : routing) flat.insert(flat.end(), ids.begin(), ids.end());
  return flat;
}

TEST(EngineRoutingReplayTest, ScoringWithTheRecordedRoutingEqualsGenerationAndOtherRoutingDoesNot) {
  const Model& model = LoadShipped("default-moe");
  EngineOptions o;
  o.kv_memory_bytes = 64 << 20;
  o.max_batch_tokens = 64;
  auto engine = Engine::Start(model, nullptr, o);  // bf16 KV, as served
  ASSERT_TRUE(engine.ok());
  const GenerationRequest r = RoutedSample(Prompt(6, 70), 40, 12);
  auto gen = (*engine)->Generate(r);
  ASSERT_TRUE(gen.ok());
  const Choice& c = (*gen)[0];
  std::vector<int32_t> routing = Flat(AllRouting(c));
  ASSERT_EQ(routing.size(), (r.prompt.size() + c.tokens.size() - 1) * 12);
  const std::vector<float> replayed = ScoreChoice(**engine, r, c, routing);
  ASSERT_EQ(replayed.size(), c.tokens.size());
  for (size_t t = 0; t < replayed.size(); ++t) ASSERT_TRUE(SameBits(replayed[t], c.samples[t].logprob)) << t;
  // The last token's experts too (they change nothing).
  std::vector<int32_t> full = routing;
  full.insert(full.end(), routing.end() - 12, routing.end());
  const std::vector<float> with_last = ScoreChoice(**engine, r, c, full);
  for (size_t t = 0; t < with_last.size(); ++t) ASSERT_TRUE(SameBits(with_last[t], c.samples[t].logprob)) << t;

  // Token P + 4 (the one after generated token 4) sent elsewhere in the first MoE layer.
  const size_t moved = r.prompt.size() + 4;
  std::vector<int32_t> other = routing;
  int32_t* ids = &other[moved * 12];
  for (int32_t e = 0; e < 8; ++e) {
    if (e != ids[0] && e != ids[1]) {
      ids[1] = e;
      break;
    }
  }
  const std::vector<float> diverted = ScoreChoice(**engine, r, c, other);
  ASSERT_EQ(diverted.size(), c.tokens.size());
  // Generated token t is sampled after position P + t - 1: tokens up to 4 are unchanged, later ones move.
  for (size_t t = 0; t <= 4; ++t) EXPECT_TRUE(SameBits(diverted[t], c.samples[t].logprob)) << t;
  size_t changed = 0;
  for (size_t t = 5; t < diverted.size(); ++t) changed += SameBits(diverted[t], c.samples[t].logprob) ? 0 : 1;
  EXPECT_GT(changed, 0u);
  EXPECT_FALSE(SameBits(diverted[5], c.samples[5].logprob));
}

TEST(EngineRoutingReplayTest, ScoreRoutingIsValidated) {
  const Model& model = LoadShipped("default-moe");
  auto engine = StartF32KvEngine(model);
  GenerationRequest s;
  s.prompt = {5, 6, 7};
  s.score_tokens = {8, 9};
  s.max_tokens = 0;
  s.score_routing.assign(5 * 12, 1);
  for (size_t i = 0; i < s.score_routing.size(); i += 2) s.score_routing[i] = 0;
  EXPECT_TRUE(engine->Generate(s).ok());
  s.score_routing.resize(4 * 12);  // all but the last
  EXPECT_TRUE(engine->Generate(s).ok());
  s.score_routing.resize(3 * 12);
  auto r = engine->Submit(s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().rfind("routing: 36 expert ids, not 12 (6 MoE layers x 2) for each of the 5", 0), 0u)
      << r.status().ToString();
  s.score_routing.resize(5 * 12, 1);
  for (size_t i = 0; i < s.score_routing.size(); i += 2) s.score_routing[i] = 0;
  s.score_routing[3 * 12 + 1 * 2 + 1] = 9;  // token 3, MoE layer 1
  r = engine->Submit(s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "routing[3][1]: expert 9 out of range [0, 8)");
  s.score_routing[3 * 12 + 1 * 2 + 1] = s.score_routing[3 * 12 + 1 * 2];
  EXPECT_EQ(engine->Submit(s).status().message(), "routing[3][1]: expert 0 repeated");
  auto dense = StartF32KvEngine(LoadShipped("default"));
  s.score_routing.assign(5 * 12, 0);
  EXPECT_EQ(dense->Submit(s).status().message().rfind("routing: the model has no MoE layers", 0), 0u);
}

TEST(EngineRoutingReplayTest, ScoringWithGivenRoutingLeavesThePrefixCacheAlone) {
  const Model& model = LoadShipped("default-moe");
  auto engine = StartF32KvEngine(model);
  const GenerationRequest r = RoutedSample(Prompt(2, 40), 8, 1);
  auto gen = engine->Generate(r);
  ASSERT_TRUE(gen.ok());
  std::vector<int32_t> routing = Flat(AllRouting((*gen)[0]));
  for (size_t i = 0; i < routing.size(); i += 2) std::swap(routing[i], routing[i + 1]);  // same experts, other order
  for (size_t i = 0; i < 12; ++i) routing[i] = static_cast<int32_t>(i % 2 == 0 ? 6 : 7);  // token 0 elsewhere
  GenerationRequest other = r;
  other.prompt = Prompt(3, 40);  // nothing cached yet
  auto scored = ScoreChoice(*engine, other, (*gen)[0], routing);
  ASSERT_FALSE(scored.empty());
  // A fresh request for the same tokens must not reuse the blocks routed as told.
  const int64_t hits = engine->Stats().prefix_hit_tokens;
  ASSERT_TRUE(engine->Generate(RoutedSample(Prompt(3, 40), 2, 1)).ok());
  EXPECT_EQ(engine->Stats().prefix_hit_tokens, hits);
}

// A copy of default-moe with layers 0 and 1 exchanged: same shapes, other weights.
std::string OtherWeights(const std::string& root) {
  const std::string dir = root + "/swapped";
  testing::CopyCheckpoint("models/default-moe", dir);
  testing::EditSafetensorsHeader(dir + "/model.safetensors", [](Json& header) {
    for (auto& [name, t] : header.items()) {
      if (name.rfind("model.layers.0.", 0) != 0) continue;
      const std::string twin = "model.layers.1." + name.substr(15);
      std::swap(t["data_offsets"], header[twin]["data_offsets"]);
    }
  });
  return dir;
}

TEST(EngineRoutingReplayTest, ASequenceSpanningASwapKeepsItsOldTokensRoutingAndReplaysItWhenRecomputed) {
  const Model& model = LoadShipped("default-moe");
  testing::TempDir root;
  std::string persist = root.path() + "/persist";
  ASSERT_EQ(::mkdir(persist.c_str(), 0700), 0);
  EngineOptions o;
  o.persist_dir = persist;
  o.kv_memory_bytes = 24 * model.KvLayoutFor(16, KvDType::kBF16).BlockBytes();
  o.max_batch_tokens = 64;
  auto started = Engine::Start(model, nullptr, o);
  ASSERT_TRUE(started.ok());
  Engine& engine = **started;
  const GenerationRequest r = RoutedSample(Prompt(5, 90), 100, 2);  // long enough for the pause to land before its end
  auto stream = engine.Submit(r);
  ASSERT_TRUE(stream.ok());
  Choice c;
  uint64_t id = 0;
  while (c.tokens.size() < 8) {
    auto e = (*stream)->Next();
    ASSERT_TRUE(e && e->has_token);
    id = e->sequence_id;
    c.tokens.push_back(e->token.token);
    c.samples.push_back(e->token);
    c.routing.push_back(e->routing);
    if (!e->prompt_routing.empty()) c.prompt_routing = e->prompt_routing;
  }
  {
    Status ps = engine.Pause(id, {.to_disk = true});
    ASSERT_TRUE(ps.ok()) << ps.ToString();
  }
  // Tokens generated before the pause landed are still in the stream.
  const size_t old_tokens = static_cast<size_t>(engine.GetSequence(id)->generated_tokens);
  while (c.tokens.size() < old_tokens) {
    auto e = (*stream)->Next();
    ASSERT_TRUE(e && e->has_token);
    c.tokens.push_back(e->token.token);
    c.samples.push_back(e->token);
    c.routing.push_back(e->routing);
  }
  ASSERT_LT(old_tokens, 90u);
  const std::vector<std::vector<int32_t>> before_swap = AllRouting(c);  // the prompt and old_tokens - 1
  // Another sample holds most blocks, so the resumed one is recomputed (under the new weights).
  auto hog = engine.Submit(RoutedSample(Prompt(6, 300), 60, 3));
  ASSERT_TRUE(hog.ok());
  auto first = (*hog)->Next();
  ASSERT_TRUE(first && first->has_token);
  ASSERT_TRUE(engine.Pause(first->sequence_id).ok());
  auto other = Model::Load(OtherWeights(root.path()));
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  ASSERT_TRUE(engine.SwapWeights(std::move(*other), 1).ok());
  const int64_t prompt_before = engine.Stats().prompt_tokens;
  ASSERT_TRUE(engine.Resume(id).ok());
  hog->reset();
  while (auto e = (*stream)->Next()) {
    if (!e->has_token) continue;
    c.tokens.push_back(e->token.token);
    c.samples.push_back(e->token);
    c.routing.push_back(e->routing);
  }
  ASSERT_EQ(c.tokens.size(), 100u);
  EXPECT_GE(engine.Stats().prompt_tokens - prompt_before, 90);  // recomputed, not restored
  const std::vector<std::vector<int32_t>> spliced = AllRouting(c);
  ASSERT_EQ(spliced.size(), r.prompt.size() + 99);
  EXPECT_EQ(std::vector<std::vector<int32_t>>(spliced.begin(), spliced.begin() + static_cast<long>(before_swap.size())),
            before_swap);
  // Every position was recomputed under the new weights with the recorded
  // experts replayed, so scoring under them with the spliced routing gives
  // the tokens sampled after the resume bitwise.
  ASSERT_EQ(engine.weight_version(), 1);  // scoring runs on the new weights
  const std::vector<float> scored = ScoreChoice(engine, r, c, Flat(spliced));
  ASSERT_EQ(scored.size(), 100u);
  for (size_t t = old_tokens; t < 100; ++t) ASSERT_TRUE(SameBits(scored[t], c.samples[t].logprob)) << t;
  // Routed afresh instead, the old tokens would have gone elsewhere under the new weights.
  const std::vector<float> fresh = ScoreChoice(engine, r, c, {});
  size_t differ = 0;
  for (size_t t = old_tokens; t < 100; ++t) differ += SameBits(fresh[t], c.samples[t].logprob) ? 0 : 1;
  EXPECT_GT(differ, 0u);
}

}  // namespace
}  // namespace flashroll::engine
