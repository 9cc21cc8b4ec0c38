#include "rollout/scaffold.h"

#include <gtest/gtest.h>

namespace flashroll {
namespace {

const char* kCommand = "awk '{s += $1} END {print s}' numbers.txt > answer.txt && cat \"answer.txt\"";

TEST(ScaffoldTest, EveryScaffoldRoundTripsToolCallsAndAnswers) {
  ASSERT_EQ(Scaffolds().size(), 3u);
  for (const Scaffold* s : Scaffolds()) {
    auto call = s->Parse(s->RenderToolCall("I add the numbers.", kCommand));
    ASSERT_TRUE(call.ok()) << s->name() << ": " << call.status().ToString();
    EXPECT_EQ(call->command, kCommand) << s->name();
    EXPECT_EQ(call->reasoning, "I add the numbers.");
    EXPECT_FALSE(call->has_answer);

    auto answer = s->Parse(s->RenderAnswer("Done.", "42"));
    ASSERT_TRUE(answer.ok()) << s->name();
    EXPECT_TRUE(answer->has_answer);
    EXPECT_EQ(answer->final_answer, "42");
    EXPECT_TRUE(answer->command.empty());
  }
}

TEST(ScaffoldTest, SystemPromptCarriesEffortAndSyntax) {
  const Scaffold* s = FindScaffold("json_tools");
  ASSERT_NE(s, nullptr);
  const std::string prompt = s->SystemPrompt(75);
  // The last line, as the chat API writes it (common/reasoning_effort.h).
  EXPECT_TRUE(prompt.ends_with("\nReasoning Effort: 75")) << prompt;
  EXPECT_NE(prompt.find("<tool_call>"), std::string::npos);
  EXPECT_EQ(FindScaffold("nope"), nullptr);
}

// The action's span is what the length reward leaves out
// (rollout/reasoning_length.h): the call or the answer with its markup.
TEST(ScaffoldTest, ParseFindsTheActionsSpan) {
  for (const Scaffold* s : Scaffolds()) {
    const std::string call = s->RenderToolCall("plan", "ls -l");
    auto parsed = s->Parse(call + "\ntrailing");
    ASSERT_TRUE(parsed.ok()) << s->name();
    EXPECT_EQ(call.substr(parsed->action_begin), call.substr(call.find("</think>\n") + 9)) << s->name();
    EXPECT_EQ(parsed->action_end, call.size()) << s->name();
    const std::string answer = s->RenderAnswer("plan", "42");
    parsed = s->Parse(answer);
    ASSERT_TRUE(parsed.ok()) << s->name();
    EXPECT_EQ(answer.substr(parsed->action_begin, parsed->action_end - parsed->action_begin), "<answer>42</answer>");
  }
}

TEST(ScaffoldTest, MalformedMessagesNameTheProblemAndOffset) {
  const Scaffold* json = FindScaffold("json_tools");
  EXPECT_EQ(json->Parse("hello").status().message(), "json_tools: byte 0: message must start with <think>");
  EXPECT_EQ(json->Parse("<think>x").status().message(), "json_tools: byte 0: <think> is not closed by </think>");
  EXPECT_EQ(json->Parse("<think>x</think>\n<tool_call>{\"name\": bash}</tool_call>").status().message(),
            "json_tools: byte 28: tool call is not valid JSON");
  EXPECT_NE(json->Parse("<think>x</think>\n<tool_call>{\"name\": \"python\", \"arguments\": {}}</tool_call>")
                .status().message().find("must name the tool \"bash\""),
            std::string::npos);
  EXPECT_NE(json->Parse("<think>x</think>\nnothing here").status().message().find("no tool call and no <answer>"),
            std::string::npos);
  const Scaffold* bash = FindScaffold("bash_block");
  EXPECT_NE(bash->Parse("<think>x</think>\n```bash\nls\n```\n<answer>1</answer>").status().message().find("not both"),
            std::string::npos);
  EXPECT_NE(bash->Parse("<think>x</think>\n```bash\nls\n").status().message().find("is not closed"),
            std::string::npos);
  const Scaffold* xml = FindScaffold("xml_tools");
  EXPECT_NE(xml->Parse("<think>x</think>\n<invoke name=\"bash\">ls</invoke>").status().message().find("no <parameter"),
            std::string::npos);
}

TEST(ScaffoldTest, ToolResultShowsErrorsAndCutsLongOutput) {
  ExecResult r;
  r.stdout_text = "out\n";
  r.stderr_text = "bad\n";
  r.exit_code = 2;
  EXPECT_EQ(Scaffold::RenderToolResult(r), "out\n[stderr]\nbad\n[exit code 2]\n");
  ExecResult empty;
  EXPECT_EQ(Scaffold::RenderToolResult(empty), "[no output]\n");
  ExecResult big;
  big.stdout_text = std::string(5000, 'x');
  const std::string shown = Scaffold::RenderToolResult(big);
  EXPECT_LT(shown.size(), 2100u);
  EXPECT_NE(shown.find("3000 bytes cut"), std::string::npos);
}

}  // namespace
}  // namespace flashroll
