// Partial re-prefill after a weight swap (EngineOptions::reprefill_older_than):
// on both shipped models, with k = 0 the continuation after a swap to other
// weights is bitwise what a fresh prefill under them gives, without the
// option the stale KV is kept (and the continuation differs), and only the
// blocks written by versions older than V - k are recomputed.
#include <gtest/gtest.h>

#include "engine/models/model.h"
#include "engine/serving/engine.h"
#include "tests/engine/checkpoint_fixture.h"
#include "tests/engine/engine_fixture.h"

namespace flashroll::engine {
namespace {

using testing::Finish;
using testing::LoadShipped;
using testing::OtherWeights;
using testing::Paused;
using testing::PauseAfter;
using testing::Prompt;
using testing::Sampled;
using testing::SameBits;
using testing::ScoreChoice;

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
  run.fresh = ScoreChoice(*engine, run.request, run.choice, {});
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

// With k = 0, a MoE sequence read back from disk after a swap without room
// for its blocks is recomputed with the new weights' own experts, not the
// old ones it recorded: the continuation is bitwise a fresh prefill's.
TEST(EngineReprefillRecomputeTest, ARestoreWithoutRoomRoutesTheStaleTokensAfresh) {
  testing::TempDir root;
  const Model& model = LoadShipped("default-moe");
  EngineOptions o;
  o.persist_dir = root.path();
  o.kv_memory_bytes = 24 * model.KvLayoutFor(16, KvDType::kBF16).BlockBytes();  // 384 tokens
  o.max_batch_tokens = 48;
  o.reprefill_older_than = 0;
  auto started = Engine::Start(model, nullptr, o);
  ASSERT_TRUE(started.ok());
  Engine& engine = **started;
  // Long enough that each pause lands before the sample's end on a loaded machine.
  const GenerationRequest r = Sampled(Prompt(4, 100), 60, 6);
  auto stream = engine.Submit(r);
  ASSERT_TRUE(stream.ok());
  Paused p;
  p.stream = *stream;
  PauseAfter(engine, &p, 6, /*to_disk=*/true);
  const size_t old_tokens = p.choice.tokens.size();
  ASSERT_TRUE(engine.SwapWeights(OtherWeights("default-moe", root.path()), 1).ok());
  // Another sample holds 19 of the 24 blocks, paused: the file cannot be read back.
  Paused held;
  {
    auto hog = engine.Submit(Sampled(Prompt(6, 300), 80, 3));
    ASSERT_TRUE(hog.ok());
    held.stream = *hog;
  }
  PauseAfter(engine, &held, 1);
  ASSERT_GE(engine.GetSequence(held.id)->kv_blocks, 19);
  ASSERT_TRUE(engine.Resume(p.id).ok());
  held.stream.reset();  // abandoned: its blocks come free and the sample recomputes
  Finish(&p);
  ASSERT_EQ(p.choice.tokens.size(), 60u);
  const std::vector<float> fresh = ScoreChoice(engine, r, p.choice, {});
  ASSERT_EQ(fresh.size(), 60u);
  for (size_t t = old_tokens; t < 60; ++t) {
    ASSERT_TRUE(SameBits(fresh[t], p.choice.samples[t].logprob)) << "token " << t;
  }
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
