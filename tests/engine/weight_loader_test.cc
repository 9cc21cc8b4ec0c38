// WeightLoader over a running engine: without a root every load is
// PermissionDenied; a load is checked before Start returns and swapped in
// the background; one load at a time; versions must rise; a background load
// that fails is kept as last_error with the old weights serving;
// WaitForVersion waits for a version (also one swapped in by another
// caller), gives up at its deadline, and ends at Stop.
#include "engine/serving/weight_loader.h"

#include <chrono>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "tests/engine/checkpoint_fixture.h"

namespace flashroll::engine {
namespace {

using std::chrono::milliseconds;
using testing::CopyCheckpoint;
using testing::TempDir;
using Clock = std::chrono::steady_clock;

const Model& Shipped() {
  static const Model* model = [] {
    auto loaded = Model::Load("models/default");
    if (!loaded.ok()) {
      ADD_FAILURE() << loaded.status().ToString();
      std::abort();
    }
    return loaded->release();
  }();
  return *model;
}

class WeightLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CopyCheckpoint("models/default", dir_.path() + "/v1");
    EngineOptions o;
    o.threads = 1;
    o.kv_memory_bytes = 16 << 20;
    auto engine = Engine::Start(Shipped(), nullptr, o);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    engine_ = std::move(engine).value();
    auto loader = WeightLoader::Create(engine_.get(), dir_.path());
    ASSERT_TRUE(loader.ok()) << loader.status().ToString();
    loader_ = std::move(loader).value();
  }

  // Waits until no load is pending.
  WeightLoaderState Settled() {
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    WeightLoaderState s = loader_->state();
    while (s.pending_version && Clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(5));
      s = loader_->state();
    }
    return s;
  }

  TempDir dir_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<WeightLoader> loader_;
};

TEST_F(WeightLoaderTest, WithoutARootEveryLoadIsRefused) {
  auto loader = WeightLoader::Create(engine_.get(), "");
  ASSERT_TRUE(loader.ok());
  Status st = (*loader)->Start("v1", 1);
  EXPECT_EQ(st.code(), Code::kPermissionDenied);
  EXPECT_NE(st.message().find("no checkpoint root is configured"), std::string::npos) << st.ToString();
  EXPECT_FALSE((*loader)->state().configured);
  EXPECT_EQ(WeightLoader::Create(engine_.get(), dir_.path() + "/none").status().code(), Code::kNotFound);
}

TEST_F(WeightLoaderTest, LoadsOneAtATimeAndVersionsRise) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  loader_->TEST_SetBeforeSwap([released] { released.wait(); });
  ASSERT_TRUE(loader_->Start("v1", 3).ok());
  WeightLoaderState s = loader_->state();
  ASSERT_EQ(s.pending_version, 3);
  EXPECT_EQ(s.pending_path, "v1");
  EXPECT_EQ(s.version, 0);
  // A second load while the first runs, whatever its version.
  for (int64_t version : {2, 3, 4}) {
    Status st = loader_->Start("v1", version);
    EXPECT_EQ(st.code(), Code::kFailedPrecondition) << version;
    EXPECT_NE(st.message().find("one load at a time"), std::string::npos) << st.ToString();
  }
  release.set_value();
  EXPECT_TRUE(loader_->WaitForVersion(3, Clock::now() + std::chrono::seconds(30)).ok());
  s = Settled();
  EXPECT_EQ(s.version, 3);
  EXPECT_FALSE(s.pending_version);
  EXPECT_TRUE(s.last_error.empty());
  loader_->TEST_SetBeforeSwap(nullptr);
  for (int64_t version : {1, 3}) {
    Status st = loader_->Start("v1", version);
    EXPECT_EQ(st.code(), Code::kFailedPrecondition) << version;
    EXPECT_NE(st.message().find("is not above the current weight version 3"), std::string::npos) << st.ToString();
  }
  ASSERT_TRUE(loader_->Start("v1", 4).ok());
  EXPECT_TRUE(loader_->WaitForVersion(4, Clock::now() + std::chrono::seconds(30)).ok());
}

TEST_F(WeightLoaderTest, ACheckThatFailsStartsNothing) {
  Status st = loader_->Start("../v1", 1);
  EXPECT_EQ(st.code(), Code::kPermissionDenied) << st.ToString();
  EXPECT_FALSE(loader_->state().pending_version);
  // The slot is free again.
  ASSERT_TRUE(loader_->Start("v1", 1).ok());
  EXPECT_TRUE(loader_->WaitForVersion(1, Clock::now() + std::chrono::seconds(30)).ok());
}

TEST_F(WeightLoaderTest, AFailedBackgroundLoadIsKeptAndTheOldWeightsServe) {
  // Another caller swaps in version 7 while the load of version 5 runs:
  // the engine refuses 5.
  loader_->TEST_SetBeforeSwap([this] {
    auto same = Model::Load("models/default");
    ASSERT_TRUE(same.ok());
    ASSERT_TRUE(engine_->SwapWeights(std::move(same).value(), 7).ok());
  });
  ASSERT_TRUE(loader_->Start("v1", 5).ok());
  WeightLoaderState s = Settled();
  EXPECT_EQ(s.version, 7);
  EXPECT_EQ(s.last_error_version, 5);
  EXPECT_NE(s.last_error.find("weight version 5 is not above the current 7"), std::string::npos) << s.last_error;
  GenerationRequest r;
  r.prompt = {5, 6, 7};
  r.max_tokens = 2;
  auto out = engine_->Generate(r);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ((*out)[0].versions, std::vector<int64_t>(2, 7));
}

TEST_F(WeightLoaderTest, WaitForVersionEndsAtItsDeadlineOrAtStop) {
  EXPECT_TRUE(loader_->WaitForVersion(0, std::nullopt).ok());
  const auto start = Clock::now();
  Status late = loader_->WaitForVersion(1, start + milliseconds(50));
  EXPECT_EQ(late.code(), Code::kDeadlineExceeded) << late.ToString();
  EXPECT_GE(Clock::now() - start, milliseconds(50));
  // A swap by another caller of the engine, which tells the loader nothing.
  auto swapped = std::async(std::launch::async, [this] { return loader_->WaitForVersion(1, std::nullopt); });
  EXPECT_EQ(swapped.wait_for(milliseconds(50)), std::future_status::timeout);
  auto same = Model::Load("models/default");
  ASSERT_TRUE(same.ok());
  ASSERT_TRUE(engine_->SwapWeights(std::move(same).value(), 1).ok());
  ASSERT_EQ(swapped.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_TRUE(swapped.get().ok());

  auto waiting = std::async(std::launch::async, [this] { return loader_->WaitForVersion(2, std::nullopt); });
  EXPECT_EQ(waiting.wait_for(milliseconds(50)), std::future_status::timeout);
  loader_->Stop();
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(waiting.get().code(), Code::kUnavailable);
  EXPECT_EQ(loader_->Start("v1", 1).code(), Code::kUnavailable);
}

}  // namespace
}  // namespace flashroll::engine
