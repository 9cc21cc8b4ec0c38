#include "common/reasoning_effort.h"

#include <gtest/gtest.h>

namespace flashroll {
namespace {

TEST(ReasoningEffortTest, PresetsAndIntegers) {
  EXPECT_EQ(ParseReasoningEffort("low").value(), 50);
  EXPECT_EQ(ParseReasoningEffort("high").value(), 75);
  EXPECT_EQ(ParseReasoningEffort("max").value(), 100);
  EXPECT_EQ(ParseReasoningEffort("1").value(), 1);
  EXPECT_EQ(ParseReasoningEffort("100").value(), 100);
}

TEST(ReasoningEffortTest, AnythingElseListsTheAcceptedValues) {
  for (const char* bad : {"medium", "Low", "0", "101", "-5", "50.5", "50 ", " 50", "", "1e2"}) {
    auto effort = ParseReasoningEffort(bad);
    ASSERT_FALSE(effort.ok()) << bad;
    EXPECT_EQ(effort.status().message(), "reasoning effort \"" + std::string(bad) +
                                             "\" is not one of \"low\" (50), \"high\" (75), \"max\" (100) or an integer 1-100");
  }
}

TEST(ReasoningEffortTest, TheLineIsLast) {
  EXPECT_EQ(WithReasoningEffort("Be brief.", 75), "Be brief.\nReasoning Effort: 75");
  EXPECT_EQ(WithReasoningEffort("", 100), "Reasoning Effort: 100");
}

}  // namespace
}  // namespace flashroll
