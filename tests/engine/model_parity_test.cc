// Parity with Hugging Face transformers: the fixtures under
// tests/data/parity/ were written by scripts/make_parity_fixtures.py (tiny
// random-weight models of every family, run in float32 by transformers).
// For every family: full-vocabulary logits of every position of every prompt
// within 1e-3, identical greedy continuations (through the KV cache), and
// identical MoE routing (expert ids per layer and position, descending
// router probability). The script records the smallest gaps between ranked
// scores; ties never decide a comparison here.
#include <cmath>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/json.h"
#include "engine/serving/generate.h"
#include "engine/models/model.h"
#include "tests/test_files.h"

namespace flashroll::engine {
namespace {

using flashroll::testing::Ints;
using flashroll::testing::ReadFloats;

const std::vector<std::string> kFixtures = {"llama", "llama3_tied", "qwen2", "qwen3", "qwen3_moe", "qwen3_moe_mixed", "qwen2_moe"};

std::string FixtureDir(const std::string& name) { return std::string("tests/data/parity/") + name; }

class ModelParityTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    Result<Json> ref = ReadJsonFile(FixtureDir(GetParam()) + "/reference.json");
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    ref_ = *ref;
    expected_ = ReadFloats(FixtureDir(GetParam()) + "/logits.bin");
    Result<std::unique_ptr<Model>> model = Model::Load(FixtureDir(GetParam()));
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = std::move(*model);
  }

  Json ref_;
  std::vector<float> expected_;
  std::unique_ptr<Model> model_;
};

TEST_P(ModelParityTest, LogitsOfEveryPositionMatchTransformers) {
  ASSERT_FALSE(ref_["prompts"].empty());
  for (const Json& prompt : ref_["prompts"]) {
    const std::vector<int32_t> tokens = Ints(prompt["tokens"]);
    const int64_t rows = prompt["rows"].get<int64_t>();
    const int64_t cols = prompt["cols"].get<int64_t>();
    const int64_t offset = prompt["offset"].get<int64_t>();
    ASSERT_EQ(cols, model_->config().vocab_size);
    ASSERT_LE(static_cast<size_t>(offset + rows * cols), expected_.size());
    KvCache cache = model_->NewCache();
    std::vector<float> logits;
    ASSERT_TRUE(model_->Forward(tokens, &cache, true, &logits).ok());
    ASSERT_EQ(logits.size(), static_cast<size_t>(rows * cols));
    double max_diff = 0;
    for (int64_t i = 0; i < rows * cols; ++i) {
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(logits[i] - expected_[offset + i])));
    }
    EXPECT_LE(max_diff, 1e-3) << GetParam() << ": prompt of " << rows << " tokens";
  }
}

TEST_P(ModelParityTest, GreedyContinuationMatchesTransformers) {
  ASSERT_FALSE(ref_["greedy"].empty());
  for (const Json& g : ref_["greedy"]) {
    GenerateOptions options;
    options.max_tokens = g["max_new_tokens"].get<int64_t>();
    Result<std::vector<int32_t>> out = Generate(*model_, Ints(g["tokens"]), options);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(*out, Ints(g["output"])) << GetParam();
  }
}

TEST_P(ModelParityTest, MoeRoutingMatchesTransformers) {
  const bool moe = model_->config().num_experts > 0;
  for (const Json& prompt : ref_["prompts"]) {
    ASSERT_EQ(prompt.contains("routing"), moe);
    if (!moe) continue;
    const std::vector<int32_t> tokens = Ints(prompt["tokens"]);
    KvCache cache = model_->NewCache();
    std::vector<float> logits;
    Routing routing;
    ASSERT_TRUE(model_->Forward(tokens, &cache, false, &logits, &routing).ok());
    const Json& want = prompt["routing"];
    ASSERT_EQ(routing.size(), want.size());
    for (size_t layer = 0; layer < routing.size(); ++layer) {
      ASSERT_EQ(routing[layer].size(), want[layer].size()) << "layer " << layer;
      for (size_t pos = 0; pos < routing[layer].size(); ++pos) {
        EXPECT_EQ(routing[layer][pos], Ints(want[layer][pos]))
            << GetParam() << " layer " << layer << " position " << pos;
      }
    }
  }
}

TEST_P(ModelParityTest, DecodingThroughTheCacheMatchesOnePass) {
  const std::vector<int32_t> tokens = Ints(ref_["prompts"][2]["tokens"]);
  KvCache whole = model_->NewCache();
  std::vector<float> all;
  ASSERT_TRUE(model_->Forward(tokens, &whole, true, &all).ok());
  KvCache stepwise = model_->NewCache();
  const int64_t vocab = model_->config().vocab_size;
  std::vector<float> one;
  for (size_t i = 0; i < tokens.size(); ++i) {
    ASSERT_TRUE(model_->Forward({tokens[i]}, &stepwise, false, &one).ok());
    for (int64_t j = 0; j < vocab; ++j) ASSERT_NEAR(one[j], all[i * vocab + j], 1e-4) << "position " << i;
  }
  EXPECT_EQ(stepwise.length(), static_cast<int64_t>(tokens.size()));
}

TEST_P(ModelParityTest, TruncatedCacheResumesLikeAFreshRun) {
  const std::vector<int32_t> tokens = Ints(ref_["prompts"][2]["tokens"]);
  const int64_t vocab = model_->config().vocab_size;
  KvCache cache = model_->NewCache();
  std::vector<float> all, tail;
  ASSERT_TRUE(model_->Forward(tokens, &cache, true, &all).ok());
  // Keep a prefix, overwrite the rest with other tokens, then rewind and
  // feed the original suffix: its logits must be those of the one-pass run.
  const int64_t keep = static_cast<int64_t>(tokens.size()) - 10;
  cache.Truncate(keep);
  ASSERT_TRUE(model_->Forward({1, 2, 3}, &cache, false, &tail).ok());
  cache.Truncate(keep + 100);
  EXPECT_EQ(cache.length(), keep + 3) << "Truncate only shortens";
  cache.Truncate(keep);
  const std::vector<int32_t> rest(tokens.begin() + keep, tokens.end());
  ASSERT_TRUE(model_->Forward(rest, &cache, true, &tail).ok());
  ASSERT_EQ(tail.size(), rest.size() * static_cast<size_t>(vocab));
  for (size_t i = 0; i < tail.size(); ++i) {
    ASSERT_NEAR(tail[i], all[keep * vocab + static_cast<int64_t>(i)], 1e-4) << "element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, ModelParityTest, ::testing::ValuesIn(kFixtures),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

TEST(ModelTest, RejectsTokensOutsideTheVocabulary) {
  Result<std::unique_ptr<Model>> model = Model::Load(FixtureDir("qwen3"));
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  KvCache cache = (*model)->NewCache();
  std::vector<float> logits;
  Status st = (*model)->Forward({1, 2, 300}, &cache, true, &logits);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("position 2"), std::string::npos) << st.message();
}

TEST(ModelTest, ReportsSizes) {
  Result<std::unique_ptr<Model>> model = Model::Load(FixtureDir("qwen3"));
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  // qwen3 fixture: 2 layers, 1 kv head of 32, float32 cache: 2 * 2 * 1 * 32 * 4.
  EXPECT_EQ((*model)->KvBytesPerToken(), 512);
  EXPECT_EQ((*model)->WeightDType(), "f32");
  // Embedding and untied head 300x64 each; per layer q 128x64, k/v 32x64, o 64x128,
  // norms 2x64 + 2x32, mlp 3x64x128; final norm 64.
  const int64_t layer = 128 * 64 + 2 * 32 * 64 + 64 * 128 + 2 * 64 + 2 * 32 + 3 * 64 * 128;
  EXPECT_EQ((*model)->ParameterCount(), 2 * 300 * 64 + 2 * layer + 64);
}

}  // namespace
}  // namespace flashroll::engine
