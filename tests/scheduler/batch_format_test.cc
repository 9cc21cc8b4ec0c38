#include "scheduler/batch_format.h"

#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "tests/scheduler/training_group_util.h"

namespace flashroll {
namespace {

using scheduler_test::ExpectSameGroup;
using scheduler_test::MakeGroup;

BatchLease MakeBatch() {
  BatchLease batch;
  batch.id = "00112233445566778899aabbccddeeff";
  batch.expires_at = std::chrono::system_clock::time_point(std::chrono::milliseconds(1'700'000'123'456));
  batch.groups = {MakeGroup(1, 3), MakeGroup(2, 1)};
  return batch;
}

void ExpectSameBatch(const BatchLease& a, const BatchLease& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.expires_at, b.expires_at);
  ASSERT_EQ(a.groups.size(), b.groups.size());
  for (size_t i = 0; i < a.groups.size(); ++i) ExpectSameGroup(a.groups[i], b.groups[i]);
}

uint32_t U32At(const std::string& body, size_t offset) {
  uint32_t x;
  std::memcpy(&x, body.data() + offset, sizeof(x));
  return x;
}

void PutU32(std::string* body, size_t offset, uint32_t x) {
  std::memcpy(body->data() + offset, &x, sizeof(x));
}

TEST(BatchFormatTest, JsonNamesEveryField) {
  BatchLease batch = MakeBatch();
  Json j = BatchToJson(batch);
  EXPECT_EQ(j["lease"], batch.id);
  EXPECT_EQ(j["expires_at_ms"], 1'700'000'123'456);
  const Json& g = j["groups"][1];
  EXPECT_EQ(g["group_id"], 2);
  EXPECT_EQ(g["task_id"], 1002);
  EXPECT_EQ(g["task_key"], "arithmetic-2");
  EXPECT_EQ(g["effort"], 52);
  const Json& s = g["samples"][0];
  EXPECT_EQ(s["sample_id"], 200);
  EXPECT_EQ(s["tokens"], Json({2000, 2001, 2002}));
  EXPECT_EQ(s["logprobs"], Json({0.0, 0.0, -0.25}));
  EXPECT_EQ(s["versions"], Json({-1, -1, 4}));
  EXPECT_EQ(s["loss_mask"], Json({0, 0, 1}));
  EXPECT_EQ(s["prompt_tokens"], 2);
  EXPECT_EQ(s["reward"], 0.5);
  EXPECT_EQ(s["reward_parts"], Json({{"verifier", 1.0}, {"length", -0.5}}));
  EXPECT_EQ(s["advantage"], 0.25);
  EXPECT_EQ(s["reasoning_tokens"], 7);
  EXPECT_EQ(s["status"], "completed");
  EXPECT_EQ(s["success"], true);
  EXPECT_EQ(s.size(), 12u) << s.dump();
}

TEST(BatchFormatTest, JsonRoundTrips) {
  BatchLease batch = MakeBatch();
  Result<BatchLease> back = BatchFromJson(BatchToJson(batch));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSameBatch(batch, *back);
}

TEST(BatchFormatTest, JsonErrorsNameTheField) {
  Json j = BatchToJson(MakeBatch());
  j["groups"][0]["samples"][1]["tokens"][2] = 1ll << 40;
  Result<BatchLease> back = BatchFromJson(j);
  EXPECT_EQ(back.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(back.status().message(),
            "batch.groups[0].samples[1].tokens[2]: 1099511627776 is out of range");

  j = BatchToJson(MakeBatch());
  j["groups"][1]["samples"][0]["reward_parts"]["length"] = "long";
  back = BatchFromJson(j);
  EXPECT_NE(back.status().message().find("batch.groups[1].samples[0].reward_parts.length"),
            std::string::npos)
      << back.status().ToString();

  j = BatchToJson(MakeBatch());
  j["groups"][0]["samples"][0]["loss_mask"][0] = 256;
  EXPECT_EQ(BatchFromJson(j).status().message(),
            "batch.groups[0].samples[0].loss_mask[0]: 256 is out of range");
}

TEST(BatchFormatTest, BinaryRoundTrips) {
  BatchLease batch = MakeBatch();
  Result<BatchLease> back = DecodeBatchBinary(EncodeBatchBinary(batch));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSameBatch(batch, *back);
}

TEST(BatchFormatTest, BinaryLayoutIsAsDocumented) {
  BatchLease batch;
  batch.id = "abc";
  batch.groups = {MakeGroup(3, 1)};  // one sample of 3 tokens
  const std::string body = EncodeBatchBinary(batch);
  ASSERT_GE(body.size(), 16u);
  EXPECT_EQ(body.substr(0, 4), "FRTB");
  EXPECT_EQ(U32At(body, 4), 1u);
  const uint32_t m = U32At(body, 8);
  EXPECT_EQ(m % 4, 0u);
  EXPECT_EQ(U32At(body, 12), 1u);
  Result<Json> metadata = ParseJson(body.substr(16, m));
  ASSERT_TRUE(metadata.ok()) << metadata.status().ToString();
  EXPECT_FALSE((*metadata)["groups"][0]["samples"][0].contains("tokens"));
  EXPECT_EQ((*metadata)["groups"][0]["samples"][0]["sample_id"], 300);

  size_t at = 16 + m;
  EXPECT_EQ(U32At(body, at), 3u);
  int32_t tokens[3];
  float logprobs[3];
  int32_t versions[3];
  std::memcpy(tokens, body.data() + at + 4, 12);
  std::memcpy(logprobs, body.data() + at + 16, 12);
  std::memcpy(versions, body.data() + at + 28, 12);
  EXPECT_EQ(tokens[2], 3002);
  EXPECT_EQ(logprobs[2], -0.25f);
  EXPECT_EQ(versions[0], -1);
  EXPECT_EQ(versions[2], 5);
  EXPECT_EQ(body.substr(at + 40, 3), std::string("\0\0\1", 3));
  EXPECT_EQ(body.size(), at + 44) << "3 mask bytes, then 1 zero byte of padding";
  EXPECT_EQ(body[at + 43], '\0');
}

TEST(BatchFormatTest, BinaryBlocksStartAligned) {
  const std::string body = EncodeBatchBinary(MakeBatch());
  EXPECT_EQ(body.size() % 4, 0u);
  size_t at = 16 + U32At(body, 8);
  for (int block = 0; block < 4; ++block) {
    ASSERT_EQ(at % 4, 0u) << "block " << block;
    const size_t n = U32At(body, at);
    at += 4 + 12 * n + (n + 3) / 4 * 4;
  }
  EXPECT_EQ(at, body.size());
}

TEST(BatchFormatTest, BinaryDecoderRejectsDamage) {
  const std::string good = EncodeBatchBinary(MakeBatch());

  std::string bad = good;
  bad[0] = 'X';
  EXPECT_EQ(DecodeBatchBinary(bad).status().message(),
            "binary batch: bad magic (expected \"FRTB\")");

  bad = good;
  PutU32(&bad, 4, 2);
  EXPECT_EQ(DecodeBatchBinary(bad).status().message(),
            "binary batch: format version 2 is not supported (expected 1)");

  bad = good;
  PutU32(&bad, 12, 5);
  EXPECT_EQ(DecodeBatchBinary(bad).status().message(),
            "binary batch: the header counts 5 samples, the metadata describes 4");

  bad = good + '\0';
  EXPECT_EQ(DecodeBatchBinary(bad).status().message(),
            "binary batch: 1 bytes after the last sample, at byte " + std::to_string(good.size()));

  bad = good;
  bad[16] = '[';
  EXPECT_EQ(DecodeBatchBinary(bad).status().code(), Code::kInvalidArgument);

  // Every truncation is an error, never a shorter batch.
  for (size_t n = 0; n < good.size(); ++n) {
    Result<BatchLease> cut = DecodeBatchBinary(std::string_view(good).substr(0, n));
    ASSERT_FALSE(cut.ok()) << "cut at " << n;
    EXPECT_EQ(cut.status().code(), Code::kInvalidArgument);
  }
  EXPECT_NE(DecodeBatchBinary(good.substr(0, good.size() - 1)).status().message().find("padding"),
            std::string::npos);
}

}  // namespace
}  // namespace flashroll
