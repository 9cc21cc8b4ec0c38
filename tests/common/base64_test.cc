#include "common/base64.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace flashroll {
namespace {

std::vector<uint8_t> Bytes(std::string_view s) { return {s.begin(), s.end()}; }

TEST(Base64Test, Rfc4648Vectors) {
  // RFC 4648 section 10.
  const std::pair<const char*, const char*> vectors[] = {{"", ""},         {"f", "Zg=="},     {"fo", "Zm8="},
                                                         {"foo", "Zm9v"}, {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="},
                                                         {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, encoded] : vectors) {
    EXPECT_EQ(Base64Encode(Bytes(plain)), encoded) << plain;
    Result<std::vector<uint8_t>> decoded = Base64Decode(encoded);
    ASSERT_TRUE(decoded.ok()) << encoded << ": " << decoded.status().ToString();
    EXPECT_EQ(*decoded, Bytes(plain)) << encoded;
  }
}

TEST(Base64Test, EveryByteValueAndLengthRoundTrips) {
  std::vector<uint8_t> bytes(259);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(255 - i);
  for (size_t n = 0; n <= bytes.size(); ++n) {
    const std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + static_cast<long>(n));
    const std::string text = Base64Encode(prefix);
    ASSERT_EQ(text.size(), (n + 2) / 3 * 4) << n;
    Result<std::vector<uint8_t>> back = Base64Decode(text);
    ASSERT_TRUE(back.ok()) << n << ": " << back.status().ToString();
    ASSERT_EQ(*back, prefix) << n;
  }
  // Both extra characters of the alphabet.
  EXPECT_EQ(Base64Encode(std::vector<uint8_t>{0xfb, 0xff, 0xbf}), "+/+/");
}

void ExpectRefused(std::string_view text, const std::string& message) {
  Result<std::vector<uint8_t>> r = Base64Decode(text);
  ASSERT_FALSE(r.ok()) << text;
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(r.status().message(), message) << text;
}

TEST(Base64Test, BadCharactersAreRefusedWithTheirOffset) {
  ExpectRefused("Zm9v!mFy", "invalid character '!' at offset 4");
  ExpectRefused("Zm9-", "invalid character '-' at offset 3");  // URL-safe alphabet
  ExpectRefused("Zm9_", "invalid character '_' at offset 3");
  ExpectRefused("Zm9v\nYmF", "invalid character '\\x0a' at offset 4");
  ExpectRefused("Zm 9", "invalid character ' ' at offset 2");
  ExpectRefused(std::string_view("Zm\0v", 4), "invalid character '\\x00' at offset 2");
  ExpectRefused("Zm\xc3\xa9", "invalid character '\\xc3' at offset 2");
}

TEST(Base64Test, BadPaddingIsRefused) {
  ExpectRefused("Zg", "length 2 is not a multiple of 4");  // unpadded
  ExpectRefused("Zm9vY", "length 5 is not a multiple of 4");
  ExpectRefused("Zg=", "length 3 is not a multiple of 4");
  ExpectRefused("Z===", "padding '=' at offset 1 before the end");
  ExpectRefused("====", "padding '=' at offset 0 before the end");
  ExpectRefused("Zg==Zm8=", "padding '=' at offset 2 before the end");
  ExpectRefused("Zm=v", "padding '=' at offset 2 before the end");
  // The bits after the last byte must be zero: "Zh==" would also read as "f".
  ExpectRefused("Zh==", "nonzero bits after the last byte at offset 1");
  ExpectRefused("Zm9=", "nonzero bits after the last byte at offset 2");
}

}  // namespace
}  // namespace flashroll
