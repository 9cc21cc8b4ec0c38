// The default models in models/ load in our engine and compute what Hugging
// Face transformers computed for them (references made by models/train.py
// from the saved bf16 weights, in float32, on the CPU).
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/serving/generate.h"
#include "engine/models/model.h"

namespace flashroll::engine {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class ShippedModelTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ShippedModelTest, FitsTheBudgetAndTheContextWindow) {
  const std::string dir = std::string("models/") + GetParam();
  struct stat st{};
  ASSERT_EQ(::stat((dir + "/model.safetensors").c_str(), &st), 0);
  EXPECT_LE(st.st_size, 16 << 20);
  auto model = Model::Load(dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_GE((*model)->config().max_position_embeddings, 4096);
  // A tokenizer trained on the demonstrations, of a few thousand tokens.
  EXPECT_GE((*model)->config().vocab_size, 2000);
}

TEST_P(ShippedModelTest, MatchesTransformers) {
  const std::string name = GetParam();
  auto model = Model::Load("models/" + name);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const std::string refs = "tests/data/model-parity/" + name;
  const nlohmann::json meta = nlohmann::json::parse(ReadAll(refs + "/parity.json"));
  const std::string blob = ReadAll(refs + "/parity_logits.bin");
  const int64_t vocab = meta["vocab"].get<int64_t>();
  ASSERT_EQ((*model)->config().vocab_size, vocab);

  size_t offset = 0, longest = 0;
  for (const auto& prompt : meta["prompts"]) {
    const std::vector<int32_t> tokens = prompt["tokens"].get<std::vector<int32_t>>();
    const std::vector<int64_t> positions = prompt["logit_positions"].get<std::vector<int64_t>>();
    KvCache cache = (*model)->NewCache();
    std::vector<float> logits;
    ASSERT_TRUE((*model)->Forward(tokens, &cache, /*all_logits=*/true, &logits).ok());
    float max_diff = 0;
    for (int64_t position : positions) {
      for (int64_t v = 0; v < vocab; ++v) {
        float reference;
        ASSERT_LE(offset + sizeof(float), blob.size());
        std::memcpy(&reference, blob.data() + offset, sizeof(float));
        offset += sizeof(float);
        max_diff = std::max(max_diff, std::fabs(reference - logits[static_cast<size_t>(position * vocab + v)]));
      }
    }
    EXPECT_LE(max_diff, 1e-3) << name << ", prompt of " << tokens.size() << " tokens";
    longest = std::max(longest, tokens.size());

    GenerateOptions options;
    options.max_tokens = static_cast<int64_t>(prompt["greedy"].size());
    auto greedy = Generate(**model, tokens, options);
    ASSERT_TRUE(greedy.ok());
    EXPECT_EQ(*greedy, prompt["greedy"].get<std::vector<int32_t>>()) << name;
  }
  EXPECT_EQ(offset, blob.size());
  // Parity must hold where attention spans a long tool output, not only on
  // short prompts.
  EXPECT_GE(longest, 1024u);
}

INSTANTIATE_TEST_SUITE_P(Models, ShippedModelTest, ::testing::Values("default", "default-moe"),
                         [](const auto& info) { return std::string(info.param) == "default" ? "Dense" : "Moe"; });

}  // namespace
}  // namespace flashroll::engine
