#include "rollout/demonstrations.h"

#include <gtest/gtest.h>

namespace flashroll {
namespace {

TEST(DemonstrationsTest, EveryFamilyAndScaffoldGivesAParseableSuccessfulTrajectory) {
  for (const TaskFamily* family : TaskFamilies()) {
    for (const Scaffold* scaffold : Scaffolds()) {
      Task task = family->Generate(11, 3);
      auto demo = SynthesizeDemonstration(*family, task, *scaffold, 60, 5);
      ASSERT_TRUE(demo.ok()) << demo.status().ToString();
      EXPECT_TRUE(demo->success) << task.id;
      ASSERT_GE(demo->messages.size(), 5u);
      EXPECT_EQ(demo->messages[0].role, "system");
      EXPECT_NE(demo->messages[0].content.find("Reasoning Effort: 60"), std::string::npos);
      EXPECT_EQ(demo->messages[1].content, task.prompt);
      // Every assistant message parses in its own scaffold; the last one answers.
      for (size_t i = 2; i < demo->messages.size(); ++i) {
        const ChatMessage& m = demo->messages[i];
        if (m.role != "assistant") {
          EXPECT_EQ(m.role, "tool");
          continue;
        }
        auto turn = scaffold->Parse(m.content);
        ASSERT_TRUE(turn.ok()) << turn.status().ToString() << "\n" << m.content;
        EXPECT_EQ(turn->has_answer, i + 1 == demo->messages.size());
      }
    }
  }
}

TEST(DemonstrationsTest, ReasoningGrowsWithEffort) {
  const TaskFamily* family = FindTaskFamily("lookup_chain");
  const Scaffold* scaffold = FindScaffold("bash_block");
  Task task = family->Generate(3, 3);
  size_t previous = 0;
  for (int effort : {1, 25, 50, 75, 100}) {
    auto demo = SynthesizeDemonstration(*family, task, *scaffold, effort, 9);
    ASSERT_TRUE(demo.ok());
    EXPECT_GT(demo->reasoning_chars, previous) << "effort " << effort;
    previous = demo->reasoning_chars;
  }
}

TEST(DemonstrationsTest, RejectsEffortOutOfRange) {
  const TaskFamily* family = FindTaskFamily("arithmetic");
  auto demo = SynthesizeDemonstration(*family, family->Generate(1, 1), *FindScaffold("xml_tools"), 101, 1);
  EXPECT_EQ(demo.status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace flashroll
