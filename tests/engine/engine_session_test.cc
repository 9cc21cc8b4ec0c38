// Sessions (Engine::OpenSession): an episode as one sequence across turns,
// tool output appended between them, KV kept across a weight swap, parked
// sessions giving their blocks back, a session paused to disk. On both
// shipped models: what a session samples is bitwise what a new request
// with the whole conversation as its prompt samples, and the prefill
// counts say what was computed.
#include <gtest/gtest.h>

#include <chrono>
#include <future>

#include "engine/models/model.h"
#include "engine/serving/engine.h"
#include "tests/engine/checkpoint_fixture.h"
#include "tests/engine/engine_fixture.h"

namespace flashroll::engine {
namespace {

using testing::LoadShipped;
using testing::OtherWeights;
using testing::Prompt;
using testing::Sampled;
using testing::SameBits;
using testing::StartEngine;

GenerationRequest SessionTurn(int64_t max_tokens, uint64_t seed) { return Sampled({}, max_tokens, seed); }

Choice RunSessionTurn(Engine& engine, uint64_t session, int64_t max_tokens, uint64_t seed) {
  auto stream = engine.GenerateInSession(session, SessionTurn(max_tokens, seed));
  EXPECT_TRUE(stream.ok()) << stream.status().ToString();
  if (!stream.ok()) return {};
  return (*stream)->Collect()[0];
}

std::vector<int32_t> Joined(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Stats are published after each step's events: wait for the count.
bool BlocksUsedReach(Engine& engine, int64_t used) {
  for (int i = 0; i < 200; ++i) {
    if (engine.Stats().kv_blocks_used == used) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

class EngineSessionTest : public ::testing::TestWithParam<const char*> {};

TEST_P(EngineSessionTest, TurnsSampleWhatRequestsWithTheWholeConversationSample) {
  const Model& model = LoadShipped(GetParam());
  const std::vector<int32_t> prompt = Prompt(3, 37), tool = Prompt(5, 21);
  auto engine = StartEngine(model);
  auto session = engine->OpenSession();
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE(engine->AppendToSession(*session, prompt).ok());
  const Choice first = RunSessionTurn(*engine, *session, 20, 11);
  ASSERT_TRUE(engine->AppendToSession(*session, tool).ok());
  const Choice second = RunSessionTurn(*engine, *session, 25, 12);
  ASSERT_EQ(first.tokens.size(), 20u);
  ASSERT_EQ(second.tokens.size(), 25u);
  // A fresh engine, no prefix cache: each turn a request of its own.
  EngineOptions plain;
  plain.prefix_caching = false;
  auto other = StartEngine(model, plain);
  auto one = other->Generate(Sampled(prompt, 20, 11));
  ASSERT_TRUE(one.ok());
  auto two = other->Generate(Sampled(Joined(Joined(prompt, first.tokens), tool), 25, 12));
  ASSERT_TRUE(two.ok());
  EXPECT_EQ((*one)[0].tokens, first.tokens);
  ASSERT_EQ((*two)[0].tokens, second.tokens);
  for (size_t t = 0; t < second.tokens.size(); ++t) {
    ASSERT_TRUE(SameBits((*two)[0].samples[t].logprob, second.samples[t].logprob)) << "token " << t;
  }
  // The second turn computed its new tokens only: the first turn's last
  // token and the tool's output.
  auto info = engine->GetSession(*session);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->tokens, static_cast<int64_t>(prompt.size() + 20 + tool.size() + 25));
  EXPECT_EQ(info->prefill_tokens, static_cast<int64_t>(prompt.size() + 1 + tool.size()));
  EXPECT_EQ(info->reprefill_tokens, 0);
  EXPECT_EQ(second.prefill_tokens, info->prefill_tokens);
  ASSERT_TRUE(engine->CloseSession(*session).ok());
  EXPECT_EQ(engine->GetSession(*session).status().code(), Code::kNotFound);
  EXPECT_TRUE(BlocksUsedReach(*engine, 0));
}

TEST_P(EngineSessionTest, AcrossASwapTheKvIsKeptAndNothingIsComputedAgain) {
  const Model& model = LoadShipped(GetParam());
  testing::TempDir root;
  const std::vector<int32_t> prompt = Prompt(7, 45), tool = Prompt(8, 19);
  auto engine = StartEngine(model);
  auto session = engine->OpenSession();
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE(engine->AppendToSession(*session, prompt).ok());
  const Choice first = RunSessionTurn(*engine, *session, 16, 3);
  ASSERT_EQ(first.tokens.size(), 16u);
  const int64_t prefill_before = engine->Stats().prefill_tokens;
  ASSERT_TRUE(engine->SwapWeights(OtherWeights(GetParam(), root.path()), 1).ok());
  ASSERT_TRUE(engine->AppendToSession(*session, tool).ok());
  const Choice second = RunSessionTurn(*engine, *session, 16, 4);
  ASSERT_EQ(second.tokens.size(), 16u);
  for (int64_t v : second.versions) EXPECT_EQ(v, 1);
  // Only the new tokens were prefilled; the history's KV is the old weights'.
  EXPECT_EQ(engine->Stats().prefill_tokens - prefill_before, static_cast<int64_t>(1 + tool.size()));
  EXPECT_EQ(engine->Stats().reprefill_tokens, 0);
  // A client that sends the turn as a new request recomputes the whole
  // history under the new weights (the prefix cache holds the old
  // version's blocks), and says so when it names what it computed before.
  const std::vector<int32_t> history = Joined(Joined(prompt, first.tokens), tool);
  GenerationRequest again = Sampled(history, 16, 4);
  again.computed_before = static_cast<int64_t>(prompt.size() + first.tokens.size()) - 1;
  auto resent = engine->Generate(again);
  ASSERT_TRUE(resent.ok());
  EXPECT_EQ((*resent)[0].prefill_tokens, static_cast<int64_t>(history.size()));
  EXPECT_EQ((*resent)[0].reprefill_tokens, again.computed_before);
  // The kept KV is the old weights': the session's turn differs from the
  // request's, computed wholly under the new ones.
  EXPECT_NE((*resent)[0].tokens, second.tokens);
  // What model() names outlives the swap (the swapped-in weights do not
  // outlive the next one): the model the engine started with.
  EXPECT_EQ(&engine->model(), &model);
}

TEST_P(EngineSessionTest, WithReprefillOlderThanTheStaleHistoryIsComputedAgain) {
  const Model& model = LoadShipped(GetParam());
  testing::TempDir root;
  EngineOptions o;
  o.reprefill_older_than = 0;
  auto engine = StartEngine(model, o);
  const std::vector<int32_t> prompt = Prompt(7, 45), tool = Prompt(8, 19);
  auto session = engine->OpenSession();
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE(engine->AppendToSession(*session, prompt).ok());
  const Choice first = RunSessionTurn(*engine, *session, 16, 3);
  ASSERT_TRUE(engine->SwapWeights(OtherWeights(GetParam(), root.path()), 1).ok());
  ASSERT_TRUE(engine->AppendToSession(*session, tool).ok());
  const Choice second = RunSessionTurn(*engine, *session, 16, 4);
  // Every position computed under version 0 ran again before the turn went on,
  // so the turn is what a fresh request under the new weights samples.
  const int64_t stale = static_cast<int64_t>(prompt.size() + first.tokens.size()) - 1;
  EXPECT_EQ(second.reprefill_tokens, stale);
  auto fresh = engine->Generate(Sampled(Joined(Joined(prompt, first.tokens), tool), 16, 4));
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ((*fresh)[0].tokens, second.tokens);
}

TEST_P(EngineSessionTest, AppendingWhileATurnRunsIsRefusedAndACancelledTurnKeepsItsTokens) {
  auto engine = StartEngine(LoadShipped(GetParam()));
  auto session = engine->OpenSession();
  ASSERT_TRUE(session.ok());
  EXPECT_EQ(engine->GenerateInSession(*session, SessionTurn(4, 1)).status().code(), Code::kInvalidArgument);  // no tokens yet
  ASSERT_TRUE(engine->AppendToSession(*session, Prompt(1, 30)).ok());
  auto stream = engine->GenerateInSession(*session, SessionTurn(400, 1));
  ASSERT_TRUE(stream.ok());
  ASSERT_TRUE((*stream)->Next().has_value());
  EXPECT_EQ(engine->AppendToSession(*session, {5}).code(), Code::kFailedPrecondition);
  EXPECT_EQ(engine->GenerateInSession(*session, SessionTurn(4, 1)).status().code(), Code::kFailedPrecondition);
  (*stream)->Cancel();
  // The cancel lands at a step boundary; then the session takes tokens again.
  Status appended = Status::FailedPrecondition("not yet");
  for (int i = 0; i < 200 && !appended.ok(); ++i) {
    appended = engine->AppendToSession(*session, {5});
    if (!appended.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(appended.ok()) << appended.ToString();
  auto info = engine->GetSession(*session);
  ASSERT_TRUE(info.ok());
  EXPECT_GT(info->tokens, 31);
  EXPECT_EQ(RunSessionTurn(*engine, *session, 5, 2).tokens.size(), 5u);
  EXPECT_EQ(engine->AppendToSession(*session + 1000, {5}).code(), Code::kNotFound);
}

TEST_P(EngineSessionTest, ParkedSessionsGiveTheirBlocksToARequestThatWaits) {
  const Model& model = LoadShipped(GetParam());
  const int64_t block_bytes = model.KvLayoutFor(16, KvDType::kBF16).BlockBytes();
  EngineOptions o;
  o.kv_memory_bytes = 24 * block_bytes;  // 384 tokens
  auto engine = StartEngine(model, o);
  // Three parked sessions of 100 tokens hold 21 of the 24 blocks.
  std::vector<uint64_t> sessions;
  for (int32_t i = 0; i < 3; ++i) {
    auto session = engine->OpenSession();
    ASSERT_TRUE(session.ok());
    ASSERT_TRUE(engine->AppendToSession(*session, Prompt(20 + i, 90)).ok());
    ASSERT_EQ(RunSessionTurn(*engine, *session, 10, 1).tokens.size(), 10u);
    sessions.push_back(*session);
  }
  EXPECT_TRUE(BlocksUsedReach(*engine, 21));
  // A request of 200 tokens needs 13 blocks: it runs once parked ones give theirs.
  auto done = std::async(std::launch::async, [&] { return engine->Generate(Sampled(Prompt(30, 190), 10, 1)); });
  ASSERT_EQ(done.wait_for(std::chrono::seconds(60)), std::future_status::ready) << "the request waited for blocks";
  auto out = done.get();
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0].tokens.size(), 10u);
  // The longest-parked session gave its blocks first; its next turn
  // computes again what the cache lost, and says so.
  const Choice next = RunSessionTurn(*engine, sessions[0], 5, 2);
  EXPECT_EQ(next.tokens.size(), 5u);
  EXPECT_GT(next.reprefill_tokens, 0);
}

// With k = 0 a parked session whose blocks were given back after a swap
// computes its history again under the new weights, routing it afresh: its
// turn is what a fresh request under them samples.
TEST_P(EngineSessionTest, AReclaimedSessionRecomputesTheStaleHistoryWithTheNewWeightsOwnRouting) {
  const Model& model = LoadShipped(GetParam());
  testing::TempDir root;
  EngineOptions o;
  o.kv_memory_bytes = 24 * model.KvLayoutFor(16, KvDType::kBF16).BlockBytes();  // 384 tokens
  o.reprefill_older_than = 0;
  auto engine = StartEngine(model, o);
  const std::vector<int32_t> prompt = Prompt(7, 90), tool = Prompt(8, 19);
  auto session = engine->OpenSession();
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE(engine->AppendToSession(*session, prompt).ok());
  const Choice first = RunSessionTurn(*engine, *session, 10, 3);
  ASSERT_TRUE(engine->SwapWeights(OtherWeights(GetParam(), root.path()), 1).ok());
  // 300 tokens need the session's blocks.
  ASSERT_TRUE(engine->Generate(Sampled(Prompt(30, 290), 10, 1)).ok());
  ASSERT_TRUE(engine->AppendToSession(*session, tool).ok());
  const Choice second = RunSessionTurn(*engine, *session, 16, 4);
  EXPECT_GT(second.reprefill_tokens, 0);
  auto fresh = engine->Generate(Sampled(Joined(Joined(prompt, first.tokens), tool), 16, 4));
  ASSERT_TRUE(fresh.ok());
  ASSERT_EQ((*fresh)[0].tokens, second.tokens);
  for (size_t t = 0; t < second.tokens.size(); ++t) {
    ASSERT_TRUE(SameBits((*fresh)[0].samples[t].logprob, second.samples[t].logprob)) << "token " << t;
  }
}

TEST_P(EngineSessionTest, ASessionPausedToDiskTakesTokensAndGoesOnAsInMemory) {
  const Model& model = LoadShipped(GetParam());
  testing::TempDir dir;
  EngineOptions o;
  o.persist_dir = dir.path();
  auto engine = StartEngine(model, o);
  auto in_memory = StartEngine(model);
  const std::vector<int32_t> prompt = Prompt(2, 40), tool = Prompt(9, 12);
  std::vector<Choice> turns[2];
  int which = 0;
  for (Engine* e : {engine.get(), in_memory.get()}) {
    auto session = e->OpenSession();
    ASSERT_TRUE(session.ok());
    ASSERT_TRUE(e->AppendToSession(*session, prompt).ok());
    turns[which].push_back(RunSessionTurn(*e, *session, 12, 5));
    if (e == engine.get()) {
      ASSERT_TRUE(e->PauseSession(*session, {.to_disk = true}).ok());
      EXPECT_EQ(dir.Files().size(), 1u);
      EXPECT_TRUE(e->GetSession(*session)->on_disk);
    }
    ASSERT_TRUE(e->AppendToSession(*session, tool).ok());
    turns[which].push_back(RunSessionTurn(*e, *session, 12, 6));
    EXPECT_EQ(turns[which].back().reprefill_tokens, 0);  // read back, not recomputed
    ++which;
  }
  EXPECT_TRUE(dir.Files().empty());
  for (size_t t = 0; t < 2; ++t) EXPECT_EQ(turns[0][t].tokens, turns[1][t].tokens) << "turn " << t;
  EXPECT_EQ(engine->PauseSession(12345, {.to_disk = true}).code(), Code::kNotFound);
}

TEST_P(EngineSessionTest, ClosingASessionMidTurnEndsTheTurn) {
  auto engine = StartEngine(LoadShipped(GetParam()));
  auto session = engine->OpenSession();
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE(engine->AppendToSession(*session, Prompt(4, 30)).ok());
  auto stream = engine->GenerateInSession(*session, SessionTurn(400, 1));
  ASSERT_TRUE(stream.ok());
  ASSERT_TRUE((*stream)->Next().has_value());
  ASSERT_TRUE(engine->CloseSession(*session).ok());
  Choice rest = (*stream)->Collect()[0];
  EXPECT_EQ(rest.finish, FinishReason::kAbort);
  EXPECT_EQ(engine->AppendToSession(*session, {5}).code(), Code::kNotFound);
  EXPECT_TRUE(BlocksUsedReach(*engine, 0));
}

INSTANTIATE_TEST_SUITE_P(Models, EngineSessionTest, ::testing::Values("default", "default-moe"));

}  // namespace
}  // namespace flashroll::engine
