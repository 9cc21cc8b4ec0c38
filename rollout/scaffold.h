// Scaffold: how an agent's turn is written as text — the system prompt that
// teaches the format, how a tool call and a final answer appear in an
// assistant message, and how a tool's result is shown back.
//
// Three scaffolds share one tool (`bash`) and one answer form
// (<answer>...</answer>) and differ in the tool-call syntax:
//   bash_block  ```bash\nCMD\n```
//   json_tools  <tool_call>{"name": "bash", "arguments": {"command": CMD}}</tool_call>
//   xml_tools   <invoke name="bash"><parameter name="command">CMD</parameter></invoke>
// Every assistant message opens with <think>...</think>. The length the
// effort-conditioned reward penalises is every sampled token but the action
// (reasoning_length.h), wherever the policy wrote its reasoning.
//
// Thread safety: scaffolds are stateless and may be shared.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "tasks/workspace.h"

namespace flashroll {

// One parsed assistant message.
struct AgentTurn {
  std::string reasoning;     // the text inside <think>...</think>
  std::string command;       // the bash command, when the turn calls the tool
  std::string final_answer;  // the text inside <answer>...</answer>, when the turn ends the episode
  bool has_answer = false;
  // The action: the byte range [action_begin, action_end) in the parsed text
  // of the tool call or the <answer>...</answer>, its markup included.
  size_t action_begin = 0, action_end = 0;
};

// Where a tool call or an answer lies in a message body, [begin, end) in bytes.
struct FoundSpan {
  bool found = false;
  size_t begin = 0, end = 0;
};

class Scaffold {
 public:
  virtual ~Scaffold() = default;
  virtual const char* name() const = 0;
  // The system prompt: the tool, the call syntax, the answer form and
  // "Reasoning Effort: {effort}" on its own line.
  std::string SystemPrompt(int effort) const;
  // An assistant message: reasoning, then a tool call or a final answer.
  std::string RenderToolCall(const std::string& reasoning, const std::string& command) const;
  std::string RenderAnswer(const std::string& reasoning, const std::string& answer) const;
  // The content of the tool message that reports `result`.
  static std::string RenderToolResult(const ExecResult& result);

  // Parses an assistant message. Errors name what is wrong and the byte
  // offset in `text`, e.g. "json_tools: byte 57: tool call is not valid JSON".
  Result<AgentTurn> Parse(const std::string& text) const;

 protected:
  virtual std::string CallSyntax() const = 0;  // shown in the system prompt
  virtual std::string WriteCall(const std::string& command) const = 0;
  // Finds a tool call in `body` (the text after </think>) and returns its
  // command; sets *found, with the call's byte range in `body`.
  virtual Result<std::string> ReadCall(const std::string& body, size_t body_offset, FoundSpan* found) const = 0;
};

// The registered scaffolds; nullptr for an unknown name.
const Scaffold* FindScaffold(const std::string& name);
std::vector<const Scaffold*> Scaffolds();

}  // namespace flashroll
