// Model::ForwardBatch's routing: every row's experts reported flat
// ([row][moe_layer][k]), and replayed instead of the router's choice.
#include <cstring>

#include <gtest/gtest.h>

#include "engine/models/model.h"

namespace flashroll::engine {
namespace {

class ModelRoutingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = Model::Load("models/default-moe");
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = m->release();
  }
  static void TearDownTestSuite() { delete model_; }

  // Runs `tokens` as one fresh sequence; logits of every row.
  static Status Run(const std::vector<int32_t>& tokens, const std::vector<int64_t>& offsets,
                    const std::vector<int32_t>& ids, std::vector<float>* logits, std::vector<int32_t>* routed) {
    const int64_t n = static_cast<int64_t>(tokens.size());
    PagedKvStorage kv(model_->KvLayoutFor(16, KvDType::kF32));
    kv.Resize((n + 15) / 16);
    std::vector<int32_t> table;
    for (int32_t b = 0; b < (n + 15) / 16; ++b) table.push_back(b);
    ForwardBatch batch;
    batch.tokens = tokens;
    batch.seqs.push_back({0, n, table.data()});
    for (int64_t t = 0; t < n; ++t) batch.logit_rows.push_back(t);
    batch.replay_offsets = offsets;
    batch.replay_ids = ids;
    logits->resize(static_cast<size_t>(n * model_->config().vocab_size));
    ForwardScratch scratch;
    return model_->ForwardBatch(batch, &kv, &scratch, logits->data(), routed);
  }

  static Model* model_;
};

Model* ModelRoutingTest::model_ = nullptr;

const std::vector<int32_t> kTokens = {5, 17, 301, 44, 9, 1200, 7, 88, 640, 23, 1999, 31, 2, 400, 77, 1000, 12, 13};

TEST_F(ModelRoutingTest, ReplayingTheRoutersOwnChoiceChangesNoBit) {
  std::vector<float> fresh, replayed;
  std::vector<int32_t> routed, routed_again;
  ASSERT_TRUE(Run(kTokens, {}, {}, &fresh, &routed).ok());
  const int64_t per_row = model_->routing_shape().TokenIds();
  ASSERT_EQ(routed.size(), kTokens.size() * static_cast<size_t>(per_row));
  // Every other row replays its own experts.
  std::vector<int64_t> offsets;
  std::vector<int32_t> ids;
  for (size_t t = 0; t < kTokens.size(); ++t) {
    if (t % 2 == 1) {
      offsets.push_back(-1);
      continue;
    }
    offsets.push_back(static_cast<int64_t>(ids.size()));
    ids.insert(ids.end(), routed.begin() + static_cast<long>(t) * per_row, routed.begin() + static_cast<long>(t + 1) * per_row);
  }
  ASSERT_TRUE(Run(kTokens, offsets, ids, &replayed, &routed_again).ok());
  EXPECT_EQ(routed_again, routed);
  EXPECT_EQ(std::memcmp(fresh.data(), replayed.data(), fresh.size() * sizeof(float)), 0);
}

TEST_F(ModelRoutingTest, ReplayingOtherExpertsUsesThem) {
  std::vector<float> fresh, replayed;
  std::vector<int32_t> routed, used;
  ASSERT_TRUE(Run(kTokens, {}, {}, &fresh, &routed).ok());
  const int64_t per_row = model_->routing_shape().TokenIds();
  const int64_t experts = model_->routing_shape().num_experts;
  // Row 3 gets, in every layer, the two experts after its own.
  std::vector<int64_t> offsets(kTokens.size(), -1);
  offsets[3] = 0;
  std::vector<int32_t> ids;
  for (int64_t l = 0; l < model_->routing_shape().moe_layers; ++l) {
    const int32_t first = routed[3 * per_row + l * 2];
    ids.push_back(static_cast<int32_t>((first + 1) % experts));
    ids.push_back(static_cast<int32_t>((first + 2) % experts));
  }
  ASSERT_TRUE(Run(kTokens, offsets, ids, &replayed, &used).ok());
  EXPECT_EQ(std::vector<int32_t>(used.begin() + 3 * per_row, used.begin() + 4 * per_row), ids);
  const size_t vocab = static_cast<size_t>(model_->config().vocab_size);
  // Rows before it are untouched; its own and later ones (attending to it) move.
  EXPECT_EQ(std::memcmp(fresh.data(), replayed.data(), 3 * vocab * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(fresh.data() + 3 * vocab, replayed.data() + 3 * vocab, vocab * sizeof(float)), 0);
}

TEST_F(ModelRoutingTest, BadReplaysAreRefusedNamingTheRowLayerAndExpert) {
  std::vector<float> logits;
  std::vector<int64_t> offsets(kTokens.size(), -1);
  offsets[2] = 0;
  std::vector<int32_t> ids(12, 1);
  for (int i = 0; i < 12; ++i) ids[static_cast<size_t>(i)] = i % 2;
  ids[7] = 9;  // moe layer 3, second expert
  Status st = Run(kTokens, offsets, ids, &logits, nullptr);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_EQ(st.message(), "row 2: moe layer 3: expert 9 out of range [0, 8)");
  ids[7] = 0;  // the same as its first
  EXPECT_EQ(Run(kTokens, offsets, ids, &logits, nullptr).message(), "row 2: moe layer 3: expert 0 repeated");
  ids[7] = 1;
  ids.pop_back();
  EXPECT_NE(Run(kTokens, offsets, ids, &logits, nullptr).message().find("row 2's ids run past the 11 given"),
            std::string::npos);
  EXPECT_NE(Run(kTokens, {0}, ids, &logits, nullptr).message().find("1 row offsets for 18 rows"), std::string::npos);
}

}  // namespace
}  // namespace flashroll::engine
