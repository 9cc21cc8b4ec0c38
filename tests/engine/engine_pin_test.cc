// Requests that pin their weight version (GenerationRequest::pin_version),
// on both shipped models: across a swap a pinned sample finishes bitwise as
// it would have on the old weights while the others move to the new ones;
// the old weights are let go when the pinned samples end; a swap that would
// need a third resident version waits for the oldest to be let go; and a
// pin the weight memory has no room for is refused at submission.
#include <algorithm>
#include <chrono>
#include <future>
#include <thread>

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
using testing::StartEngine;


GenerationRequest Pinned(std::vector<int32_t> prompt, int64_t max_tokens, uint64_t seed) {
  GenerationRequest r = Sampled(std::move(prompt), max_tokens, seed);
  r.pin_version = true;
  return r;
}

// What `r` gives uninterrupted on the shipped weights, in an engine of its own.
Choice Reference(const char* name, const GenerationRequest& r) {
  auto engine = StartEngine(LoadShipped(name));
  auto out = engine->Generate(r);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  return out.ok() ? (*out)[0] : Choice();
}

void ExpectSameSample(const Choice& got, const Choice& want) {
  ASSERT_EQ(got.tokens, want.tokens);
  ASSERT_EQ(got.samples.size(), want.samples.size());
  for (size_t t = 0; t < got.samples.size(); ++t) {
    ASSERT_TRUE(SameBits(got.samples[t].logprob, want.samples[t].logprob)) << "token " << t;
  }
}

// Waits (a few seconds at most) until the engine holds `n` weight versions.
bool ResidentVersionsReach(Engine& engine, int64_t n) {
  for (int i = 0; i < 500; ++i) {
    if (engine.Stats().resident_weight_versions == n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

class EnginePinTest : public ::testing::TestWithParam<const char*> {};

TEST_P(EnginePinTest, APinnedSampleFinishesOnTheOldWeightsWhileTheOthersMove) {
  testing::TempDir root;
  EngineOptions o;
  o.reprefill_older_than = 0;  // the unpinned sample's stale KV is recomputed; the pinned one's is not stale
  auto engine = StartEngine(LoadShipped(GetParam()), o);
  const GenerationRequest pinned = Pinned(Prompt(3, 40), 80, 11);
  const GenerationRequest other = Sampled(Prompt(3, 40), 80, 11);
  Paused p, u;
  p.stream = *engine->Submit(pinned);
  PauseAfter(*engine, &p, 6);
  // Submitted after the pinned one's prefill, the other takes its prompt's
  // two full blocks from the prefix cache: its re-prefill must not rewrite
  // them in place.
  u.stream = *engine->Submit(other);
  PauseAfter(*engine, &u, 6);
  ASSERT_GT(engine->Stats().prefix_hit_tokens, 0);
  ASSERT_TRUE(engine->SwapWeights(OtherWeights(GetParam(), root.path()), 1).ok());
  EXPECT_EQ(engine->weight_version(), 1);
  ASSERT_TRUE(engine->Resume(p.id).ok());
  ASSERT_TRUE(engine->Resume(u.id).ok());
  Finish(&p);
  Finish(&u);
  ASSERT_EQ(p.choice.tokens.size(), 80u);
  ExpectSameSample(p.choice, Reference(GetParam(), pinned));
  EXPECT_EQ(p.choice.versions, std::vector<int64_t>(80, 0));
  // The unpinned one went on with version 1.
  ASSERT_EQ(u.choice.tokens.size(), 80u);
  const size_t before = u.choice.tokens.size() - static_cast<size_t>(std::count(u.choice.versions.begin(), u.choice.versions.end(), 1));
  EXPECT_LT(before, 80u);
  for (size_t t = 0; t < 80; ++t) EXPECT_EQ(u.choice.versions[t], t < before ? 0 : 1) << "token " << t;
  // Only the unpinned sample's stale KV was recomputed: the prompt and its old tokens but the last.
  EXPECT_EQ(engine->Stats().reprefill_tokens, static_cast<int64_t>(other.prompt.size() + before - 1));
  EXPECT_TRUE(ResidentVersionsReach(*engine, 1));
}

TEST_P(EnginePinTest, OldWeightsStayResidentWhileAPinnedSampleIsPaused) {
  testing::TempDir root;
  auto engine = StartEngine(LoadShipped(GetParam()));
  Paused p;
  p.stream = *engine->Submit(Pinned(Prompt(5, 30), 40, 3));
  PauseAfter(*engine, &p, 4);
  ASSERT_TRUE(engine->SwapWeights(OtherWeights(GetParam(), root.path()), 1).ok());
  // A request without a pin runs on the new weights meanwhile.
  auto fresh = engine->Generate(Sampled(Prompt(6, 20), 5, 4));
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ((*fresh)[0].versions, std::vector<int64_t>(5, 1));
  EXPECT_EQ(engine->Stats().resident_weight_versions, 2);
  p.stream.reset();  // abandoned: its pin ends with it
  EXPECT_TRUE(ResidentVersionsReach(*engine, 1));
}

TEST_P(EnginePinTest, APinnedSampleRecomputedAfterASwapTakesNoNewVersionBlocksFromThePrefixCache) {
  // A pinned sample paused to disk that finds too few free blocks when it
  // resumes is recomputed; the prefix cache then holds the same prompt's
  // blocks written by the new weights, which it must not reuse.
  testing::TempDir root, persist;
  const Model& model = LoadShipped(GetParam());
  EngineOptions o;
  o.persist_dir = persist.path();
  o.kv_memory_bytes = 24 * model.KvLayoutFor(16, KvDType::kBF16).BlockBytes();
  auto engine = StartEngine(model, o);
  const GenerationRequest pinned = Pinned(Prompt(7, 40), 60, 5);
  Paused p;
  p.stream = *engine->Submit(pinned);
  PauseAfter(*engine, &p, 6, /*to_disk=*/true);  // 3 blocks of KV or more
  ASSERT_TRUE(engine->SwapWeights(OtherWeights(GetParam(), root.path()), 1).ok());
  // The same prompt on the new weights: its two full blocks become known.
  GenerationRequest same;
  same.prompt = pinned.prompt;
  same.max_tokens = 1;
  ASSERT_TRUE(engine->Generate(same).ok());
  // A request paused holding 22 of the 24 blocks (337 prompt tokens and up
  // to 16 generated; tried again should it end before the pause lands).
  Paused hog;
  for (int attempt = 0; attempt < 5 && hog.id == 0; ++attempt) {
    hog.stream = *engine->Submit(Sampled(Prompt(8, 21 * 16 + 1), 16, 6));
    auto first = hog.stream->Next();
    ASSERT_TRUE(first && first->has_token);
    if (engine->Pause(first->sequence_id).ok()) hog.id = first->sequence_id;
  }
  ASSERT_NE(hog.id, 0u);
  ASSERT_EQ(engine->GetSequence(hog.id)->kv_blocks, 22);
  ASSERT_TRUE(engine->Resume(p.id).ok());  // too few blocks: recomputed
  EXPECT_FALSE(engine->GetSequence(p.id)->on_disk);
  hog.stream.reset();
  Finish(&p);
  ASSERT_EQ(p.choice.tokens.size(), 60u);
  ExpectSameSample(p.choice, Reference(GetParam(), pinned));
}

// p0 pinned to version 0 and paused, p1 admitted under version 1 (pinned,
// paused), and a swap to version 2 that needs a third version: waiting.
// Each is long enough to be still generating when its pause lands on a
// loaded machine (at 30 tokens p1 once finished first).
constexpr int64_t kPinnedTokens = 150;
struct WaitingThirdVersion {
  testing::TempDir root;
  std::unique_ptr<Engine> engine;
  Paused p0, p1;
  std::future<Status> swap;
};

void StartWaitingSwap(const char* name, WaitingThirdVersion* t) {
  t->engine = StartEngine(LoadShipped(name));
  Engine& engine = *t->engine;
  t->p0.stream = *engine.Submit(Pinned(Prompt(1, 25), kPinnedTokens, 1));
  PauseAfter(engine, &t->p0, 3);
  ASSERT_TRUE(engine.SwapWeights(OtherWeights(name, t->root.path()), 1).ok());
  t->p1.stream = *engine.Submit(Pinned(Prompt(2, 25), kPinnedTokens, 2));  // admitted under version 1
  PauseAfter(engine, &t->p1, 3);
  auto original = Model::Load(std::string("models/") + name);
  ASSERT_TRUE(original.ok());
  t->swap = std::async(std::launch::async, [&engine, m = std::move(*original)]() mutable {
    return engine.SwapWeights(std::move(m), 2);
  });
  EXPECT_EQ(t->swap.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  EXPECT_EQ(engine.weight_version(), 1);
}

TEST_P(EnginePinTest, ASwapThatWouldNeedAThirdVersionWaitsForTheOldestToBeLetGo) {
  WaitingThirdVersion t;
  StartWaitingSwap(GetParam(), &t);
  ASSERT_TRUE(t.swap.valid());
  Engine& engine = *t.engine;
  // Only one swap waits at a time.
  testing::TempDir root3;  // version 1's files stay mapped: not written over
  Status second = engine.SwapWeights(OtherWeights(GetParam(), root3.path()), 3);
  EXPECT_EQ(second.code(), Code::kFailedPrecondition) << second.ToString();
  EXPECT_EQ(second.message(), "weight version 2 is waiting for pinned sequences to end");
  // Version 0's sample ends: the swap goes through, version 1 stays for p1.
  ASSERT_TRUE(engine.Resume(t.p0.id).ok());
  Finish(&t.p0);
  ASSERT_EQ(t.swap.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_TRUE(t.swap.get().ok());
  EXPECT_EQ(engine.weight_version(), 2);
  EXPECT_EQ(t.p0.choice.versions, std::vector<int64_t>(kPinnedTokens, 0));
  ASSERT_TRUE(engine.Resume(t.p1.id).ok());
  Finish(&t.p1);
  EXPECT_EQ(t.p1.choice.versions, std::vector<int64_t>(kPinnedTokens, 1));
  EXPECT_TRUE(ResidentVersionsReach(engine, 1));
}

TEST_P(EnginePinTest, AWaitingSwapIsAnsweredWhenTheEngineStops) {
  WaitingThirdVersion t;
  StartWaitingSwap(GetParam(), &t);
  ASSERT_TRUE(t.swap.valid());
  t.engine.reset();
  ASSERT_EQ(t.swap.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  Status st = t.swap.get();
  EXPECT_EQ(st.code(), Code::kUnavailable) << st.ToString();
}

INSTANTIATE_TEST_SUITE_P(Models, EnginePinTest, ::testing::Values("default", "default-moe"));

TEST(EnginePinMemoryTest, APinIsRefusedAtSubmissionWithoutRoomForTwoVersions) {
  const Model& model = LoadShipped("default");
  EngineOptions o;
  o.weight_memory_bytes = 2 * model.WeightBytes() - 1;
  auto engine = StartEngine(model, o);
  auto refused = engine->Submit(Pinned(Prompt(1, 10), 4, 1));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(refused.status().message(), "pin_version: two resident weight versions need " +
                                            std::to_string(2 * model.WeightBytes()) +
                                            " bytes; the engine's weight memory is " +
                                            std::to_string(2 * model.WeightBytes() - 1));
  // Without the pin it runs; with room for two the pin is taken.
  EXPECT_TRUE(engine->Generate(Sampled(Prompt(1, 10), 4, 1)).ok());
  o.weight_memory_bytes = 2 * model.WeightBytes();
  auto roomy = StartEngine(model, o);
  EXPECT_TRUE(roomy->Generate(Pinned(Prompt(1, 10), 4, 1)).ok());
}

TEST(EnginePinMemoryTest, WeightBytesCountsEveryTensorInItsStorageType) {
  // The shipped dense model: 6.54 M bf16 parameters, the tied embedding once.
  const Model& model = LoadShipped("default");
  EXPECT_EQ(model.WeightBytes(), 2 * model.ParameterCount());
}

}  // namespace
}  // namespace flashroll::engine
