#include "common/crc32c.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace flashroll {
namespace {

TEST(Crc32cTest, KnownVectors) {
  // The check value of CRC-32C, and RFC 3720 (iSCSI) B.4's 32 bytes of zeros and of 0xFF.
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(TEST_Crc32cPortable("123456789", 9), 0xE3069283u);
  const std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF);
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(Crc32c(nullptr, 0), 0u);
}

TEST(Crc32cTest, BothPathsAgreeOnEveryLengthAndAlignment) {
  std::vector<uint8_t> bytes(300);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 131 + 7);
  for (size_t start = 0; start < 9; ++start) {
    for (size_t n = 0; start + n <= bytes.size(); n += 7) {
      ASSERT_EQ(Crc32c(bytes.data() + start, n), TEST_Crc32cPortable(bytes.data() + start, n)) << start << " " << n;
    }
  }
}

TEST(Crc32cTest, ContinuesAcrossPieces) {
  const std::string text = "the quick brown fox jumps over the lazy dog";
  const uint32_t whole = Crc32c(text.data(), text.size());
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    EXPECT_EQ(Crc32c(text.data() + cut, text.size() - cut, Crc32c(text.data(), cut)), whole) << cut;
  }
  std::string flipped = text;
  flipped[5] ^= 1;
  EXPECT_NE(Crc32c(flipped.data(), flipped.size()), whole);
}

}  // namespace
}  // namespace flashroll
