#include "common/strings.h"

#include <gtest/gtest.h>

namespace flashroll {
namespace {

TEST(StringsTest, TrimWhitespace) {
  EXPECT_EQ(TrimWhitespace("  a b \r\n"), "a b");
  EXPECT_EQ(TrimWhitespace("\t\n "), "");
  EXPECT_EQ(TrimWhitespace("x"), "x");
}

TEST(StringsTest, SplitNonEmpty) {
  EXPECT_EQ(SplitNonEmpty("a,,b,", ','), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(SplitNonEmpty("", ','), std::vector<std::string>{});
  EXPECT_EQ(SplitNonEmpty("1,50,100", ','), (std::vector<std::string>{"1", "50", "100"}));
}

}  // namespace
}  // namespace flashroll
