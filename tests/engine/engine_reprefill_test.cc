// Partial re-prefill after a weight swap (EngineOptions::reprefill_older_than):
// on both shipped models, with k = 0 the continuation after a swap to other
// weights is bitwise what a fresh prefill under them gives, without the
// option the stale KV is kept (and the continuation differs), and only the
// blocks written by versions older than V - k are recomputed.
#include <cstring>
#include <map>

#include <gtest/gtest.h>

#include "engine/models/model.h"
#include "engine/serving/engine.h"
#include "tests/engine/checkpoint_fixture.h"

namespace flashroll::engine {
namespace {

const Model& LoadShipped(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Model>> models;
  auto& m = models[name];
  if (!m) {
    auto loaded = Model::Load("models/" + name);
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
  return r;
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

// models/NAME with layers 0 and 1 exchanged: the same shapes, other weights.
std::unique_ptr<Model> OtherWeights(const std::string& name, const std::string& root) {
  const std::string dir = root + "/" + name + "-swapped";
  testing::CopyCheckpoint("models/" + name, dir);
  testing::EditSafetensorsHeader(dir + "/model.safetensors", [](Json& header) {
    for (auto& [tensor, t] : header.items()) {
      if (tensor.rfind("model.layers.0.", 0) != 0) continue;
      std::swap(t["data_offsets"], header["model.layers.1." + tensor.substr(15)]["data_offsets"]);
    }
  });
  auto m = Model::Load(dir);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(*m) : nullptr;
}

std::unique_ptr<Engine> StartEngine(const Model& model, int64_t reprefill_older_than, std::string persist_dir = "") {
  EngineOptions o;
  o.persist_dir = std::move(persist_dir);
  o.kv_memory_bytes = 64 << 20;
  o.max_batch_tokens = 48;  // the re-prefill runs in chunks
  o.reprefill_older_than = reprefill_older_than;
  auto e = Engine::Start(model, nullptr, o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return std::move(*e);
}

// A sample read up to a pause (in memory) that lands somewhere after its
// `at`-th token; every token generated before the pause is read.
struct Paused {
  std::shared_ptr<RequestStream> stream;
  uint64_t id = 0;
  Choice choice;
};

void ReadToken(Paused* p, const StreamEvent& e) {
  p->choice.tokens.push_back(e.token.token);
  p->choice.samples.push_back(e.token);
  p->choice.versions.push_back(e.version);
}

void PauseAfter(Engine& engine, Paused* p, size_t at, bool to_disk = false) {
  while (p->choice.tokens.size() < at) {
    auto e = p->stream->Next();
    ASSERT_TRUE(e && e->has_token);
    p->id = e->sequence_id;
    ReadToken(p, *e);
  }
  ASSERT_TRUE(engine.Pause(p->id, {.to_disk = to_disk}).ok());
  const size_t generated = static_cast<size_t>(engine.GetSequence(p->id)->generated_tokens);
  while (p->choice.tokens.size() < generated) {
    auto e = p->stream->Next();
    ASSERT_TRUE(e && e->has_token);
    ReadToken(p, *e);
  }
}

void Finish(Paused* p) {
  while (auto e = p->stream->Next()) {
    if (e->has_token) ReadToken(p, *e);
  }
}

// The logprobs of `c`'s tokens after `prompt` under the engine's current weights, from a fresh prefill.
std::vector<float> Score(Engine& engine, const GenerationRequest& r, const Choice& c) {
  GenerationRequest s;
  s.prompt = r.prompt;
  s.score_tokens = c.tokens;
  s.max_tokens = 0;
  s.sampling.temperature = r.sampling.temperature;
  auto out = engine.Generate(s);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  std::vector<float> lp;
  if (out.ok()) {
    for (const SampledToken& t : (*out)[0].samples) lp.push_back(t.logprob);
  }
  return lp;
}

class EngineReprefillTest : public ::testing::TestWithParam<const char*> {};

// Runs a 40-token prompt, pauses it after its 6th token, swaps to other
// weights, resumes it to the end; the tokens generated after the swap and
// how they score under a fresh prefill of the new weights.
struct SwapRun {
  GenerationRequest request;
  Choice choice;
  size_t old_tokens = 0;
  std::vector<float> fresh;
  EngineStats stats;
};

SwapRun RunAcrossASwap(const char* name, int64_t reprefill_older_than, bool to_disk = false) {
  SwapRun run;
  testing::TempDir root;
  auto engine = StartEngine(LoadShipped(name), reprefill_older_than, to_disk ? root.path() : "");
  run.request = Sampled(Prompt(4, 40), 120, 6);
  auto stream = engine->Submit(run.request);
  EXPECT_TRUE(stream.ok());
  Paused p;
  p.stream = *stream;
  PauseAfter(*engine, &p, 6, to_disk);
  run.old_tokens = p.choice.tokens.size();
  EXPECT_TRUE(engine->SwapWeights(OtherWeights(name, root.path()), 1).ok());
  EXPECT_TRUE(engine->Resume(p.id).ok());
  Finish(&p);
  run.choice = p.choice;
  run.fresh = Score(*engine, run.request, run.choice);
  run.stats = engine->Stats();
  return run;
}

TEST_P(EngineReprefillTest, WithKZeroTheContinuationEqualsAFreshPrefillUnderTheNewWeights) {
  const SwapRun run = RunAcrossASwap(GetParam(), 0);
  ASSERT_EQ(run.choice.tokens.size(), 120u);
  ASSERT_LT(run.old_tokens, 100u);
  ASSERT_EQ(run.fresh.size(), 120u);
  EXPECT_EQ(run.choice.versions[run.old_tokens - 1], 0);
  EXPECT_EQ(run.choice.versions[run.old_tokens], 1);
  for (size_t t = run.old_tokens; t < 120; ++t) {
    ASSERT_TRUE(SameBits(run.fresh[t], run.choice.samples[t].logprob)) << "token " << t;
  }
  // Every computed position was stale: the prompt and each old token but the last.
  EXPECT_EQ(run.stats.reprefill_tokens, static_cast<int64_t>(run.request.prompt.size() + run.old_tokens - 1));
}

TEST_P(EngineReprefillTest, BlocksReadBackFromDiskAfterTheSwapAreRecomputedToo) {
  // The sequence file keeps each block's version.
  const SwapRun run = RunAcrossASwap(GetParam(), 0, /*to_disk=*/true);
  ASSERT_EQ(run.fresh.size(), 120u);
  for (size_t t = run.old_tokens; t < 120; ++t) {
    ASSERT_TRUE(SameBits(run.fresh[t], run.choice.samples[t].logprob)) << "token " << t;
  }
  EXPECT_EQ(run.stats.reprefill_tokens, static_cast<int64_t>(run.request.prompt.size() + run.old_tokens - 1));
}

TEST_P(EngineReprefillTest, WithoutItTheStaleKvIsKept) {
  const SwapRun run = RunAcrossASwap(GetParam(), -1);
  ASSERT_EQ(run.fresh.size(), 120u);
  size_t differ = 0;
  for (size_t t = run.old_tokens; t < 120; ++t) differ += SameBits(run.fresh[t], run.choice.samples[t].logprob) ? 0 : 1;
  EXPECT_GT(differ, 0u);
  EXPECT_EQ(run.stats.reprefill_tokens, 0);
}

TEST_P(EngineReprefillTest, OnlyBlocksOlderThanVMinusKAreRecomputed) {
  testing::TempDir root;
  auto engine = StartEngine(LoadShipped(GetParam()), 1);
  const GenerationRequest r = Sampled(Prompt(9, 37), 150, 2);
  auto stream = engine->Submit(r);
  ASSERT_TRUE(stream.ok());
  Paused p;
  p.stream = *stream;
  PauseAfter(*engine, &p, 3);
  const int64_t c1 = static_cast<int64_t>(r.prompt.size() + p.choice.tokens.size()) - 1;  // computed by version 0
  // Version 1 is within k = 1 of version 0: nothing is recomputed.
  ASSERT_TRUE(engine->SwapWeights(OtherWeights(GetParam(), root.path()), 1).ok());
  ASSERT_TRUE(engine->Resume(p.id).ok());
  PauseAfter(*engine, &p, p.choice.tokens.size() + 40);
  EXPECT_EQ(engine->Stats().reprefill_tokens, 0);
  const int64_t c2 = static_cast<int64_t>(r.prompt.size() + p.choice.tokens.size()) - 1;
  ASSERT_LT(c2, 180);
  // Version 2: blocks holding anything of version 0 are stale, those version 1 wrote alone are kept.
  auto original = Model::Load(std::string("models/") + GetParam());
  ASSERT_TRUE(original.ok());
  ASSERT_TRUE(engine->SwapWeights(std::move(*original), 2).ok());
  ASSERT_TRUE(engine->Resume(p.id).ok());
  Finish(&p);
  ASSERT_EQ(p.choice.tokens.size(), 150u);
  const int64_t bs = 16;
  const int64_t stale_end = std::min(c2, (c1 - 1) / bs * bs + bs);
  ASSERT_LT(stale_end, c2);  // some blocks were kept
  EXPECT_EQ(engine->Stats().reprefill_tokens, stale_end);
}

INSTANTIATE_TEST_SUITE_P(Models, EngineReprefillTest, ::testing::Values("default", "default-moe"));

TEST(EngineReprefillOptionsTest, RefusesANegativeAgeOtherThanOff) {
  EngineOptions o;
  o.reprefill_older_than = -2;
  auto e = Engine::Start(LoadShipped("default"), nullptr, o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().message().rfind("reprefill_older_than: must be -1 (off) or at least 0, got -2", 0), 0u);
}

}  // namespace
}  // namespace flashroll::engine
