#include "rollout/demonstrations.h"

#include <set>
#include <string>
#include <vector>

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

// Averaged over seeds: one seed's sentence counts scatter around the mean.
TEST(DemonstrationsTest, ReasoningGrowsWithEffort) {
  const TaskFamily* family = FindTaskFamily("lookup_chain");
  const Scaffold* scaffold = FindScaffold("bash_block");
  Task task = family->Generate(3, 3);
  size_t previous = 0;
  for (int effort : {1, 25, 50, 75, 100}) {
    size_t total = 0;
    for (uint64_t seed = 1; seed <= 12; ++seed) {
      auto demo = SynthesizeDemonstration(*family, task, *scaffold, effort, seed);
      ASSERT_TRUE(demo.ok());
      total += demo->reasoning_chars;
    }
    EXPECT_GT(total, previous) << "effort " << effort;
    previous = total;
  }
}

// At one effort the reasoning length varies with the seed (at effort 1
// too, whose mean is no sentence beyond the goal): an RL length reward needs
// a spread to choose from.
TEST(DemonstrationsTest, ReasoningLengthSpreadsAtEveryEffort) {
  const TaskFamily* family = FindTaskFamily("arithmetic");
  const Scaffold* scaffold = FindScaffold("bash_block");
  Task task = family->Generate(2, 4);
  for (int effort : {1, 50, 100}) {
    std::set<size_t> lengths;
    for (uint64_t seed = 1; seed <= 10; ++seed) {
      auto demo = SynthesizeDemonstration(*family, task, *scaffold, effort, seed);
      ASSERT_TRUE(demo.ok());
      lengths.insert(demo->reasoning_chars);
    }
    EXPECT_GE(lengths.size(), 3u) << "effort " << effort;
  }
}

// The <think> sections of a demonstration's assistant turns, in order.
std::vector<std::string> ThinkSections(const Demonstration& demo) {
  std::vector<std::string> sections;
  for (const ChatMessage& m : demo.messages) {
    if (m.role != "assistant") continue;
    const size_t open = m.content.find("<think>\n"), close = m.content.find("\n</think>");
    if (open != std::string::npos && close != std::string::npos) sections.push_back(m.content.substr(open + 8, close - open - 8));
  }
  return sections;
}

// reasoning_chars counts every turn's reasoning, the later turns' too, and
// the later turns' checking sentences scatter as well (the answer turn's
// text is otherwise fixed for a task).
TEST(DemonstrationsTest, EveryTurnsReasoningIsCountedAndLaterTurnsScatter) {
  const TaskFamily* family = FindTaskFamily("lookup_chain");
  const Scaffold* scaffold = FindScaffold("bash_block");
  Task task = family->Generate(3, 3);
  std::set<size_t> last_turn;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    auto demo = SynthesizeDemonstration(*family, task, *scaffold, 1, seed);
    ASSERT_TRUE(demo.ok());
    const std::vector<std::string> sections = ThinkSections(*demo);
    ASSERT_GE(sections.size(), 3u);
    size_t total = 0;
    for (const std::string& s : sections) total += s.size();
    EXPECT_EQ(demo->reasoning_chars, total) << "seed " << seed;
    last_turn.insert(sections.back().size());
  }
  EXPECT_GE(last_turn.size(), 2u);
}

// The first turn carries the planning sentences: about 12 at effort 100,
// none to 2 at effort 1.
TEST(DemonstrationsTest, TheFirstTurnPlansMoreAtHighEffort) {
  const TaskFamily* family = FindTaskFamily("lookup_chain");
  const Scaffold* scaffold = FindScaffold("bash_block");
  Task task = family->Generate(3, 3);
  size_t low = 0, high = 0;
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    low += ThinkSections(*SynthesizeDemonstration(*family, task, *scaffold, 1, seed)).front().size();
    high += ThinkSections(*SynthesizeDemonstration(*family, task, *scaffold, 100, seed)).front().size();
  }
  // Ten or more sentences of 30-80 characters each, per demonstration.
  EXPECT_GT(high, low + 10 * 300) << low << " vs " << high;
}

TEST(DemonstrationsTest, RejectsEffortOutOfRange) {
  const TaskFamily* family = FindTaskFamily("arithmetic");
  auto demo = SynthesizeDemonstration(*family, family->Generate(1, 1), *FindScaffold("xml_tools"), 101, 1);
  EXPECT_EQ(demo.status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace flashroll
