#include "common/log.h"

#include <gtest/gtest.h>

namespace flashroll::log {
namespace {

TEST(LogTest, FormatsFieldsAndQuotes) {
  std::string line = FormatLine(Level::kWarn, "sandbox created", {{"id", "sb-1"}, {"ms", 3.25}, {"n", 7},
                                                                  {"msg", "two words"}, {"ok", true}});
  EXPECT_NE(line.find(" WARN sandbox created id=sb-1 ms=3.25 n=7 msg=\"two words\" ok=true\n"),
            std::string::npos)
      << line;
  EXPECT_EQ(line.size() > 24 && line[4] == '-' && line[23] == 'Z', true) << line;
}

TEST(LogTest, LevelsFilter) {
  Level saved = GetLevel();
  SetLevel(Level::kWarn);
  EXPECT_FALSE(Enabled(Level::kInfo));
  EXPECT_TRUE(Enabled(Level::kError));
  SetLevel(Level::kOff);
  EXPECT_FALSE(Enabled(Level::kError));
  SetLevel(saved);
  EXPECT_EQ(*ParseLevel("debug"), Level::kDebug);
  EXPECT_FALSE(ParseLevel("loud").ok());
}

}  // namespace
}  // namespace flashroll::log
