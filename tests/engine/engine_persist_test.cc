// Sequences paused to disk (Engine::Pause with to_disk): on both shipped
// models (dense and MoE) a sequence resumed from its file continues bitwise
// as if never paused; a damaged, truncated, foreign or misplaced file fails
// the choice with an error naming the file; and finished, cancelled or
// abandoned samples leave no KV block, no file and no memory behind.
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "engine/models/model.h"
#include "engine/serving/engine.h"
#include "engine/serving/sequence_file.h"
#include "tests/engine/engine_fixture.h"

#if defined(__SANITIZE_ADDRESS__)
#define FLASHROLL_PERSIST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FLASHROLL_PERSIST_SANITIZED 1
#endif
#endif

namespace flashroll::engine {
namespace {

using testing::LoadShipped;
using testing::Prompt;
using testing::SameBits;
using testing::SampledWithTopLogprobs;
using testing::TempDir;

std::unique_ptr<Engine> StartPersistingEngine(const Model& model, const std::string& persist_dir, int64_t kv_bytes = 64 << 20) {
  EngineOptions o;
  o.kv_memory_bytes = kv_bytes;
  o.max_batch_tokens = 96;
  o.persist_dir = persist_dir;
  auto e = Engine::Start(model, nullptr, o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return std::move(*e);
}

// Waits until the engine has published stats for which `done` holds.
template <typename Pred>
EngineStats WaitForStats(const Engine& engine, Pred done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  EngineStats s = engine.Stats();
  while (!done(s) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    s = engine.Stats();
  }
  return s;
}

// Reads `count` token events of a stream into `out`; the sequence id.
uint64_t Take(RequestStream& stream, int count, Choice* out) {
  uint64_t id = 0;
  for (int i = 0; i < count; ++i) {
    auto e = stream.Next();
    EXPECT_TRUE(e && e->has_token);
    if (!e || !e->has_token) return 0;
    id = e->sequence_id;
    out->tokens.push_back(e->token.token);
    out->samples.push_back(e->token);
  }
  return id;
}

// Reads the rest of a stream into `out`.
void Drain(RequestStream& stream, Choice* out) {
  while (auto e = stream.Next()) {
    if (e->has_token) {
      out->tokens.push_back(e->token.token);
      out->samples.push_back(e->token);
    }
    if (e->finish != FinishReason::kNone) {
      out->finish = e->finish;
      out->error = e->error;
    }
  }
}

void ExpectBitwiseEqual(const Choice& got, const Choice& want) {
  ASSERT_EQ(got.tokens, want.tokens);
  for (size_t t = 0; t < got.samples.size(); ++t) {
    const SampledToken& a = got.samples[t];
    const SampledToken& b = want.samples[t];
    ASSERT_TRUE(SameBits(a.logprob, b.logprob)) << "token " << t << ": " << a.logprob << " vs " << b.logprob;
    ASSERT_EQ(a.top.size(), b.top.size());
    for (size_t j = 0; j < a.top.size(); ++j) {
      ASSERT_EQ(a.top[j].token, b.top[j].token);
      ASSERT_TRUE(SameBits(a.top[j].logprob, b.top[j].logprob));
    }
  }
}

bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

class EnginePersistTest : public ::testing::TestWithParam<const char*> {};

TEST_P(EnginePersistTest, ResumedFromDiskContinuesBitwiseAsIfNeverPaused) {
  const Model& model = LoadShipped(GetParam());
  TempDir dir;
  auto engine = StartPersistingEngine(model, dir.path());
  // Long enough that it is still generating when the test, on a loaded
  // machine, gets to its second pause.
  const GenerationRequest probe = SampledWithTopLogprobs(Prompt(7, 33), 400, 9);
  auto straight = engine->Generate(probe);
  ASSERT_TRUE(straight.ok());

  auto stream = engine->Submit(probe);
  ASSERT_TRUE(stream.ok());
  Choice resumed;
  const uint64_t id = Take(**stream, 5, &resumed);
  ASSERT_NE(id, 0u);
  ASSERT_TRUE(engine->Pause(id, {.to_disk = true}).ok());
  const std::string file = SequenceFilePath(dir.path(), id);
  EXPECT_TRUE(Exists(file));
  auto info = engine->GetSequence(id);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->state, "paused");
  EXPECT_TRUE(info->on_disk);
  EXPECT_EQ(info->kv_blocks, 0);  // released: the file holds its KV
  EXPECT_EQ(WaitForStats(*engine, [](const EngineStats& s) { return s.kv_blocks_used == 0; }).kv_blocks_used, 0);
  EXPECT_EQ(engine->Pause(id, {.to_disk = true}).code(), Code::kFailedPrecondition);
  // Other work runs meanwhile and reuses the blocks.
  ASSERT_TRUE(engine->Generate(SampledWithTopLogprobs(Prompt(8, 50), 30, 1)).ok());

  // Resumed, it computes only the token it had not yet computed: its KV came from the file.
  const int64_t before = WaitForStats(*engine, [](const EngineStats& s) { return s.running + s.waiting == 0; }).prompt_tokens;
  ASSERT_TRUE(engine->Resume(id).ok());
  EXPECT_FALSE(Exists(file));
  EXPECT_FALSE(engine->GetSequence(id)->on_disk);
  Take(**stream, 10, &resumed);
  // Twice: a sequence resumed from its file pauses to disk again.
  ASSERT_TRUE(engine->Pause(id, {.to_disk = true}).ok());
  ASSERT_TRUE(engine->Resume(id).ok());
  Drain(**stream, &resumed);
  EXPECT_EQ(resumed.finish, FinishReason::kLength);
  ExpectBitwiseEqual(resumed, (*straight)[0]);
  const EngineStats after = WaitForStats(*engine, [](const EngineStats& s) { return s.running + s.waiting == 0; });
  EXPECT_LT(after.prompt_tokens - before, 10);
  EXPECT_EQ(after.kv_blocks_used, 0);
  EXPECT_TRUE(dir.Files().empty());
}

INSTANTIATE_TEST_SUITE_P(Models, EnginePersistTest, ::testing::Values("default", "default-moe"));

TEST(EnginePersistErrorsTest, PausingToDiskNeedsAPersistDir) {
  auto engine = StartPersistingEngine(LoadShipped("default"), "");
  auto stream = engine->Submit(SampledWithTopLogprobs(Prompt(1, 20), 200, 1));
  ASSERT_TRUE(stream.ok());
  Choice c;
  const uint64_t id = Take(**stream, 1, &c);
  Status st = engine->Pause(id, {.to_disk = true});
  EXPECT_EQ(st.code(), Code::kFailedPrecondition);
  EXPECT_NE(st.message().find("persist_dir, which is not set"), std::string::npos) << st.ToString();
  EXPECT_EQ(engine->GetSequence(id)->state, "running");
}

TEST(EnginePersistErrorsTest, StartRefusesAPersistDirThatIsNotADirectory) {
  TempDir dir;
  const std::string file = dir.path() + "/plain";
  std::ofstream(file) << "x";
  for (const std::string& bad : {file, dir.path() + "/missing"}) {
    EngineOptions o;
    o.kv_memory_bytes = 8 << 20;
    o.persist_dir = bad;
    auto e = Engine::Start(LoadShipped("default"), nullptr, o);
    ASSERT_FALSE(e.ok());
    EXPECT_EQ(e.status().message(), "persist_dir: " + bad + " is not a directory");
  }
}

TEST(EnginePersistErrorsTest, AFailedWriteLeavesTheSequenceRunning) {
  TempDir dir;
  const std::string gone = dir.path() + "/gone";
  ASSERT_EQ(::mkdir(gone.c_str(), 0700), 0);
  auto engine = StartPersistingEngine(LoadShipped("default"), gone);
  ::rmdir(gone.c_str());
  auto stream = engine->Submit(SampledWithTopLogprobs(Prompt(2, 20), 60, 1));
  ASSERT_TRUE(stream.ok());
  Choice c;
  const uint64_t id = Take(**stream, 1, &c);
  Status st = engine->Pause(id, {.to_disk = true});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("open " + SequenceFilePath(gone, id) + ".tmp"), std::string::npos) << st.ToString();
  Drain(**stream, &c);
  EXPECT_EQ(c.finish, FinishReason::kLength);
  EXPECT_EQ(c.tokens.size(), 60u);
}

// Pauses a fresh sample of `engine` to disk after 3 tokens; its id.
uint64_t PauseOneToDisk(Engine& engine, std::shared_ptr<RequestStream>* stream, int32_t seed = 3) {
  auto s = engine.Submit(SampledWithTopLogprobs(Prompt(seed, 40), 200, 5));
  EXPECT_TRUE(s.ok());
  *stream = *s;
  Choice c;
  const uint64_t id = Take(**stream, 3, &c);
  EXPECT_TRUE(engine.Pause(id, {.to_disk = true}).ok());
  return id;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteBytes(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

TEST(EnginePersistErrorsTest, ADamagedFileFailsTheChoiceAndIsRemoved) {
  TempDir dir;
  auto engine = StartPersistingEngine(LoadShipped("default"), dir.path());
  const std::vector<std::pair<std::function<void(const std::string&)>, std::string>> damages = {
      {[](const std::string& f) {
         std::string b = ReadBytes(f);
         b[b.size() / 2] ^= 1;
         WriteBytes(f, b);
       },
       "checksum mismatch"},
      {[](const std::string& f) { ASSERT_EQ(::truncate(f.c_str(), 1000), 0); }, "truncated or padded"},
      {[](const std::string& f) {
         std::string b = ReadBytes(f);
         b[8] = 9;  // the format version
         WriteBytes(f, b);
       },
       "format version 9"},
      {[](const std::string& f) {
         std::string b = ReadBytes(f);
         b[8] = 1;  // a file of the format before routing was kept
         WriteBytes(f, b);
       },
       "format version 1, this build reads version 2 only"},
      {[](const std::string& f) {
         auto snap = ReadSequenceFile(f);
         ASSERT_TRUE(snap.ok());
         snap->layout.block_size = 8;
         snap->block_versions.resize(static_cast<size_t>((snap->computed + 7) / 8));
         ASSERT_TRUE(WriteSequenceFile(f, *snap).ok());
       },
       "in blocks of 8, not the engine's"},
      {[](const std::string& f) {
         auto snap = ReadSequenceFile(f);
         ASSERT_TRUE(snap.ok());
         snap->routing = {1, 2, 3};  // a dense model records none
         ASSERT_TRUE(WriteSequenceFile(f, *snap).ok());
       },
       "holds 3 bytes of routing, not whole tokens of 0 bytes"},
      {[](const std::string& f) { ::unlink(f.c_str()); }, "No such file"},
  };
  for (const auto& [damage, what] : damages) {
    SCOPED_TRACE(what);
    std::shared_ptr<RequestStream> stream;
    const uint64_t id = PauseOneToDisk(*engine, &stream);
    const int64_t generated = engine->GetSequence(id)->generated_tokens;
    const std::string file = SequenceFilePath(dir.path(), id);
    damage(file);
    Status st = engine->Resume(id);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find(file), std::string::npos) << st.ToString();
    EXPECT_NE(st.message().find(what), std::string::npos) << st.ToString();
    Choice c;
    Drain(*stream, &c);
    EXPECT_EQ(c.finish, FinishReason::kAbort);
    EXPECT_EQ(c.error, st.message());
    EXPECT_EQ(3 + static_cast<int64_t>(c.tokens.size()), generated);  // nothing after the pause
    EXPECT_FALSE(Exists(file));
    EXPECT_EQ(engine->GetSequence(id).status().code(), Code::kNotFound);
  }
  // Collect carries the error too.
  std::shared_ptr<RequestStream> stream;
  const uint64_t id = PauseOneToDisk(*engine, &stream);
  ::unlink(SequenceFilePath(dir.path(), id).c_str());
  EXPECT_FALSE(engine->Resume(id).ok());
  const std::vector<Choice> choices = stream->Collect();
  EXPECT_EQ(choices[0].finish, FinishReason::kAbort);
  EXPECT_NE(choices[0].error.find(SequenceFilePath(dir.path(), id)), std::string::npos);
  EXPECT_EQ(WaitForStats(*engine, [](const EngineStats& s) { return s.kv_blocks_used == 0; }).kv_blocks_used, 0);
  EXPECT_TRUE(dir.Files().empty());
}

TEST(EnginePersistErrorsTest, AnotherSequencesFileIsRefused) {
  TempDir dir;
  auto engine = StartPersistingEngine(LoadShipped("default"), dir.path());
  std::shared_ptr<RequestStream> a_stream, b_stream;
  const uint64_t a = PauseOneToDisk(*engine, &a_stream, 3);
  const uint64_t b = PauseOneToDisk(*engine, &b_stream, 4);
  const std::string fa = SequenceFilePath(dir.path(), a), fb = SequenceFilePath(dir.path(), b);
  // How many tokens b holds depends on when its pause landed.
  const auto b_info = engine->GetSequence(b);
  ASSERT_TRUE(b_info.ok());
  const int64_t b_tokens = b_info->prompt_tokens + b_info->generated_tokens;
  ASSERT_EQ(::rename(fb.c_str(), fa.c_str()), 0);  // b's file where a's belongs
  Status st = engine->Resume(a);
  EXPECT_EQ(st.code(), Code::kCorruption);
  EXPECT_NE(st.message().find("sequence file " + fa + ": holds sequence " + std::to_string(b) + " (" +
                              std::to_string(b_tokens) + " tokens), not paused sequence " + std::to_string(a)),
            std::string::npos)
      << st.ToString();
  EXPECT_EQ(engine->Resume(b).code(), Code::kNotFound);  // its file is gone
}

TEST(EnginePersistErrorsTest, TooFewFreeBlocksRecomputesInstead) {
  const Model& model = LoadShipped("default");
  TempDir dir;
  // 24 blocks of 16 tokens.
  auto engine = StartPersistingEngine(model, dir.path(), 24 * model.KvLayoutFor(16, KvDType::kBF16).BlockBytes());
  const GenerationRequest probe = SampledWithTopLogprobs(Prompt(5, 100), 30, 2);
  auto straight = engine->Generate(probe);
  ASSERT_TRUE(straight.ok());
  auto stream = engine->Submit(probe);
  ASSERT_TRUE(stream.ok());
  Choice resumed;
  const uint64_t id = Take(**stream, 3, &resumed);
  ASSERT_TRUE(engine->Pause(id, {.to_disk = true}).ok());  // 7 blocks on disk
  // Another sample holds 19 or more blocks, paused in memory.
  auto hog = engine->Submit(SampledWithTopLogprobs(Prompt(6, 300), 80, 3));
  ASSERT_TRUE(hog.ok());
  Choice hog_tokens;
  const uint64_t hog_id = Take(**hog, 1, &hog_tokens);
  ASSERT_TRUE(engine->Pause(hog_id).ok());
  ASSERT_GE(engine->GetSequence(hog_id)->kv_blocks, 19);
  const int64_t before = WaitForStats(*engine, [](const EngineStats& s) { return s.running + s.waiting == 0; }).prompt_tokens;
  ASSERT_TRUE(engine->Resume(id).ok());
  EXPECT_TRUE(dir.Files().empty());
  hog->reset();  // abandoned: its blocks come free and the sample recomputes
  Drain(**stream, &resumed);
  ExpectBitwiseEqual(resumed, (*straight)[0]);
  const EngineStats after = WaitForStats(*engine, [](const EngineStats& s) { return s.running + s.waiting == 0; });
  // Restored KV would leave nothing to compute but the next token; some of
  // the recomputed prompt may come from the prefix cache.
  EXPECT_GE(after.prompt_tokens - before, 16);
}

TEST(EnginePersistErrorsTest, BlocksRestoredAfterAWeightSwapKeepTheirOldVersionInThePrefixCache) {
  TempDir dir;
  auto engine = StartPersistingEngine(LoadShipped("default"), dir.path());
  const GenerationRequest probe = SampledWithTopLogprobs(Prompt(9, 40), 200, 4);  // long enough for the pause to land before its end
  auto stream = engine->Submit(probe);
  ASSERT_TRUE(stream.ok());
  Choice c;
  const uint64_t id = Take(**stream, 3, &c);
  ASSERT_TRUE(engine->Pause(id, {.to_disk = true}).ok());
  auto same = Model::Load("models/default");
  ASSERT_TRUE(same.ok());
  ASSERT_TRUE(engine->SwapWeights(std::move(*same), 1).ok());
  ASSERT_TRUE(engine->Resume(id).ok());
  Drain(**stream, &c);
  EXPECT_EQ(c.finish, FinishReason::kLength);
  // Its prompt blocks hold version 0's keys and values: a request on version 1 must not reuse them.
  const int64_t hits = WaitForStats(*engine, [](const EngineStats& s) { return s.running + s.waiting == 0; }).prefix_hit_tokens;
  ASSERT_TRUE(engine->Generate(probe).ok());
  EXPECT_EQ(engine->Stats().prefix_hit_tokens, hits);
}

// A MoE sequence read back from its file makes its full blocks known to the
// prefix cache again with their routing, so a later request that hits them
// gets the experts its prompt was routed to (they were made known without
// routing, and a hit read past its end).
TEST(EnginePersistRoutingTest, BlocksReadBackOnAMoeModelAreKnownWithTheirRouting) {
  TempDir dir;
  const Model& model = LoadShipped("default-moe");
  auto engine = StartPersistingEngine(model, dir.path(), 24 * model.KvLayoutFor(16, KvDType::kBF16).BlockBytes());
  GenerationRequest first = SampledWithTopLogprobs(Prompt(6, 64), 40, 2);
  first.return_prompt_routing = true;
  auto stream = engine->Submit(first);
  ASSERT_TRUE(stream.ok());
  auto e = (*stream)->Next();
  ASSERT_TRUE(e && e->has_token);
  const std::vector<std::vector<int32_t>> routed = e->prompt_routing;
  ASSERT_EQ(routed.size(), 63u);
  ASSERT_TRUE(engine->Pause(e->sequence_id, {.to_disk = true}).ok());
  // 380 tokens of the pool's 384: the cache forgets the paused prompt's blocks.
  ASSERT_TRUE(engine->Generate(SampledWithTopLogprobs(Prompt(7, 370), 10, 1)).ok());
  ASSERT_TRUE(engine->Resume(e->sequence_id).ok());
  Choice rest;
  Drain(**stream, &rest);
  ASSERT_EQ(rest.finish, FinishReason::kLength);
  const int64_t hits = WaitForStats(*engine, [](const EngineStats& s) { return s.running + s.waiting == 0; }).prefix_hit_tokens;
  GenerationRequest again = SampledWithTopLogprobs(first.prompt, 2, 3);
  again.return_prompt_routing = true;
  auto out = engine->Generate(again);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(WaitForStats(*engine, [&](const EngineStats& s) { return s.prefix_hit_tokens > hits; }).prefix_hit_tokens,
            hits + 48)
      << "the read-back blocks were hit";
  EXPECT_EQ((*out)[0].prompt_routing, routed);
}

long ResidentPages() {
  std::ifstream statm("/proc/self/statm");
  long size = 0, resident = 0;
  statm >> size >> resident;
  return resident;
}

// On the smallest dense and MoE fixtures; the MoE samples also carry their
// per-token routing (recorded, returned, written to and read from their files).
class EnginePersistGcTest : public ::testing::TestWithParam<const char*> {};

TEST_P(EnginePersistGcTest, TenThousandSamplesLeaveNoBlocksFilesOrMemory) {
#ifdef FLASHROLL_PERSIST_SANITIZED
  const int kSamples = 1000;  // ASan makes each far slower; the leak checker covers memory there
#else
  const int kSamples = 10000;
#endif
  const int kWave = 100;
  TempDir dir;
  // The smallest models there are (2 layers, 64 wide, 300 tokens): the engine's bookkeeping is what is tested.
  const Model& model = LoadShipped(GetParam());
  const bool moe = !model.routing_shape().empty();
  auto engine = StartPersistingEngine(model, dir.path(), 4 << 20);
  // The KV pool's pages become resident as blocks are first used: hold
  // every block once (samples paused in memory), so that the baseline
  // below already counts the whole pool.
  {
    const int64_t pool = engine->Stats().kv_blocks_total;
    std::vector<std::shared_ptr<RequestStream>> holders;
    for (int64_t h = 0; h * 13 < pool + 13; ++h) {
      std::vector<int32_t> prompt;
      for (int64_t t = 0; t < 200; ++t) prompt.push_back(static_cast<int32_t>((h * 131 + t * 17 + t * t) % 300));
      auto s = engine->Submit(SampledWithTopLogprobs(prompt, 50, static_cast<uint64_t>(h)));
      ASSERT_TRUE(s.ok());
      holders.push_back(*s);
    }
    auto nearly_full = [&] {
      return WaitForStats(*engine, [](const EngineStats&) { return true; }).kv_blocks_used >= pool - 13;
    };
    for (auto& h : holders) {
      if (nearly_full()) break;
      auto e = h->Next(std::chrono::milliseconds(2000));
      if (e && e->has_token) (void)engine->Pause(e->sequence_id);
    }
    EXPECT_TRUE(nearly_full()) << engine->Stats().kv_blocks_used << " of " << pool << " blocks held";
    holders.clear();  // abandoned
  }
  long warm_rss = 0;
  int paused = 0;
  for (int first = 0; first < kSamples; first += kWave) {
    if (first == 1000) warm_rss = ResidentPages();
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = first; i < first + kWave; ++i) {
      // Every tenth sample is paused to disk (it asks for more tokens so the pause lands before its end).
      const bool pause = i % 10 == 0;
      std::vector<int32_t> prompt;
      for (int t = 0; t < 4 + i % 13; ++t) prompt.push_back((i * 31 + t * 7) % 300);
      GenerationRequest r = SampledWithTopLogprobs(prompt, pause ? 16 : 1 + i % 2, static_cast<uint64_t>(i));
      r.return_routing = moe;
      r.return_prompt_routing = moe;
      auto s = engine->Submit(std::move(r));
      ASSERT_TRUE(s.ok());
      streams.push_back(*s);
    }
    for (int k = 0; k < kWave; ++k) {
      const int i = first + k;
      if (i % 10 != 0) continue;
      auto e = streams[k]->Next();
      ASSERT_TRUE(e && e->has_token);
      if (engine->Pause(e->sequence_id, {.to_disk = true}).ok()) ++paused;
      // Half are cancelled, half abandoned.
      if (i % 20 == 0) {
        streams[k]->Cancel();
      } else {
        streams[k].reset();
      }
    }
    for (auto& s : streams) {
      if (s) s->Collect();
    }
  }
  EXPECT_GT(paused, kSamples / 20);
  const EngineStats s = WaitForStats(
      *engine, [](const EngineStats& st) { return st.kv_blocks_used == 0 && st.running + st.waiting + st.paused == 0; });
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_EQ(s.paused, 0);
  EXPECT_TRUE(dir.Files().empty()) << dir.Files().size() << " files left, e.g. " << dir.Files()[0];
  if (warm_rss > 0) {
    const long grown_kib = (ResidentPages() - warm_rss) * (::sysconf(_SC_PAGESIZE) / 1024);
    EXPECT_LT(grown_kib, 1024) << "resident memory grew by " << grown_kib << " KiB after the warm-up";
    std::printf("%s: %d samples, resident memory %+ld KiB from sample 1,000 to the end\n", GetParam(), kSamples,
                grown_kib);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, EnginePersistGcTest,
                         ::testing::Values("tests/data/parity/qwen3", "tests/data/parity/qwen3_moe"));

}  // namespace
}  // namespace flashroll::engine
