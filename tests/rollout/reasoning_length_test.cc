// The length term cannot be dodged (issue 22, item 2): l counts every token
// the policy sampled but its parsed action, so reasoning written outside the
// first <think> (after it, in a second block, after the answer, in a message
// with no <think> at all) costs as much as reasoning inside it. Driven
// through the real episode path with a scripted policy.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/tokenizer/tokenizer.h"
#include "rollout/episode.h"
#include "rollout/scaffold.h"
#include "rollout/scripted_policy.h"
#include "tasks/task.h"
#include "tasks/workspace.h"
#include "tests/rollout/rollout_fixtures.h"

namespace flashroll {
namespace {

constexpr char kReasoning[] =
    "First I add the two numbers, then I multiply the sum by three and check the result twice "
    "before I write it down, because a wrong answer costs more than a careful one.";

class ReasoningLengthTest : public rollout_testing::WithDefaultTokenizer<> {
 protected:
  // The first turn of an episode whose policy writes `message` first (then
  // answers, when the first turn was a tool call).
  static EpisodeTurn FirstTurn(const std::string& message, const Scaffold& scaffold = *Scaffolds()[0]) {
    ScriptedPolicy policy(*tokenizer_, {message, scaffold.RenderAnswer("Done.", "1")});
    auto workspace = LocalWorkspace::Create();
    EXPECT_TRUE(workspace.ok());
    EpisodeOptions options;
    options.max_turns = 2;
    auto episode = RunEpisode(policy, *tokenizer_, scaffold, TaskFamilies()[0]->Generate(3, 1), **workspace, options);
    EXPECT_TRUE(episode.ok()) << episode.status().ToString();
    EXPECT_FALSE(episode->turns.empty());
    return episode->turns.at(0);
  }

  static int64_t Tokens(const std::string& text) {
    return static_cast<int64_t>(tokenizer_->Encode(text, /*parse_special=*/false).size());
  }

};

// Token boundaries may merge across the seams where text is spliced in.
constexpr int64_t kSeamSlack = 2;

TEST_F(ReasoningLengthTest, ReasoningBetweenThinkAndTheCallCounts) {
  const Scaffold& scaffold = *Scaffolds()[0];
  const EpisodeTurn plain = FirstTurn(scaffold.RenderToolCall("Add.", "echo 4"));
  const EpisodeTurn dodged = FirstTurn("<think>\nAdd.\n</think>\n" + std::string(kReasoning) + "\n```bash\necho 4\n```");
  ASSERT_TRUE(plain.format_valid && dodged.format_valid) << dodged.format_error;
  EXPECT_GE(dodged.reasoning_tokens - plain.reasoning_tokens, Tokens(kReasoning) - kSeamSlack);
}

TEST_F(ReasoningLengthTest, EveryThinkBlockCounts) {
  const Scaffold& scaffold = *Scaffolds()[0];
  const EpisodeTurn one = FirstTurn(scaffold.RenderToolCall("Add.", "echo 4"));
  const EpisodeTurn two =
      FirstTurn("<think>\nAdd.\n</think>\n<think>\n" + std::string(kReasoning) + "\n</think>\n```bash\necho 4\n```");
  ASSERT_TRUE(two.format_valid) << two.format_error;
  EXPECT_GE(two.reasoning_tokens - one.reasoning_tokens, Tokens(kReasoning) - kSeamSlack);
}

TEST_F(ReasoningLengthTest, ReasoningAfterTheAnswerCounts) {
  const Scaffold& scaffold = *Scaffolds()[0];
  const EpisodeTurn plain = FirstTurn(scaffold.RenderAnswer("Add.", "4"));
  const EpisodeTurn dodged = FirstTurn(scaffold.RenderAnswer("Add.", "4") + "\n" + kReasoning);
  ASSERT_TRUE(dodged.format_valid) << dodged.format_error;
  EXPECT_GE(dodged.reasoning_tokens - plain.reasoning_tokens, Tokens(kReasoning) - kSeamSlack);
}

// A message that does not parse has no action: all of it counts, its
// closing <|im_end|> included, whether or not it opened a <think>.
TEST_F(ReasoningLengthTest, AMessageThatDoesNotParseCountsWhole) {
  for (const std::string& message : {std::string(kReasoning), "<think>\n" + std::string(kReasoning)}) {
    const EpisodeTurn turn = FirstTurn(message);
    ASSERT_FALSE(turn.format_valid);
    EXPECT_EQ(turn.reasoning_tokens, Tokens(message) + 1) << message;
    EXPECT_EQ(turn.reasoning_tokens, turn.token_end - turn.token_begin) << message;
  }
}

// The action is free in every scaffold: a longer command or answer adds
// nothing beyond the tokens that straddle its edges.
TEST_F(ReasoningLengthTest, TheActionIsNotCounted) {
  const std::string long_text = "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20";
  for (const Scaffold* scaffold : Scaffolds()) {
    const EpisodeTurn short_call = FirstTurn(scaffold->RenderToolCall("Add.", "echo 4"), *scaffold);
    const EpisodeTurn long_call = FirstTurn(scaffold->RenderToolCall("Add.", "echo " + long_text), *scaffold);
    ASSERT_TRUE(long_call.format_valid) << scaffold->name() << ": " << long_call.format_error;
    EXPECT_LE(long_call.reasoning_tokens - short_call.reasoning_tokens, kSeamSlack) << scaffold->name();
    const EpisodeTurn short_answer = FirstTurn(scaffold->RenderAnswer("Add.", "4"), *scaffold);
    const EpisodeTurn long_answer = FirstTurn(scaffold->RenderAnswer("Add.", long_text), *scaffold);
    EXPECT_LE(long_answer.reasoning_tokens - short_answer.reasoning_tokens, kSeamSlack) << scaffold->name();
    // and what is not the action is: the <think> block and <|im_end|>.
    EXPECT_GE(short_answer.reasoning_tokens, Tokens("<think>\nAdd.\n</think>\n") + 1 - kSeamSlack) << scaffold->name();
  }
}

}  // namespace
}  // namespace flashroll
