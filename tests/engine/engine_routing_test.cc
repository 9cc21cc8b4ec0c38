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

namespace flashroll::engine {
namespace {

const Model& LoadShipped(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Model>> models;
  auto& m = models[name];
  if (!m) {
    auto loaded = Model::Load(name.find('/') == std::string::npos ? "models/" + name : name);
    if (!loaded.ok()) {
      ADD_FAILURE() << loaded.status().ToString();
      std::abort();
    }
    m = std::move(*loaded);
  }
  return *m;
}

std::vector<int32_t> Prompt(int32_t seed, int64_t len) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < len; ++i) p.push_back(static_cast<int32_t>(3 + (seed * 7919 + i * 104729) % 2400));
  return p;
}

GenerationRequest Sampled(std::vector<int32_t> prompt, int64_t max_tokens, uint64_t seed) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.sampling.temperature = 0.9;
  r.sampling.seed = seed;
  r.return_routing = true;
  r.return_prompt_routing = true;
  return r;
}

// F32 KV, as Model::Forward's reference cache, so the reference routing is
// bitwise the engine's.
std::unique_ptr<Engine> StartEngine(const Model& model, EngineOptions o = {}) {
  if (o.kv_memory_bytes == EngineOptions().kv_memory_bytes) o.kv_memory_bytes = 64 << 20;
  o.kv_dtype = KvDType::kF32;
  o.max_batch_tokens = 96;
  auto e = Engine::Start(model, nullptr, o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return std::move(*e);
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
  auto engine = StartEngine(model);
  GenerationRequest r = Sampled(Prompt(3, 45), 12, 5);
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
  auto engine = StartEngine(model, o);
  std::vector<GenerationRequest> reqs;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 4; ++i) {
    reqs.push_back(Sampled(Prompt(10 + i, 30), 30, static_cast<uint64_t>(i)));
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
  auto engine = StartEngine(model);
  GenerationRequest r = Sampled(Prompt(1, 10), 4, 1);
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
  auto engine = StartEngine(model, o);
  const GenerationRequest r = Sampled(Prompt(4, 37), 20, 8);
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

}  // namespace
}  // namespace flashroll::engine
