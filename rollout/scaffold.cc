#include "rollout/scaffold.h"

#include <nlohmann/json.hpp>

#include "common/reasoning_effort.h"
#include "common/strings.h"

namespace flashroll {
namespace {

// Tool output beyond this is cut: long outputs cost context and teach nothing.
constexpr size_t kMaxToolResultBytes = 2000;


std::string Trimmed(const std::string& s) { return std::string(TrimWhitespace(s)); }

Status FormatError(const char* scaffold, size_t offset, const std::string& what) {
  return Status::InvalidArgument(std::string(scaffold) + ": byte " + std::to_string(offset) + ": " + what);
}

// Finds `open`...`close` in body; returns the inner text. found->found is
// false when `open` is absent; an unclosed tag is an error. The span runs
// from `open` to the end of `close`.
Result<std::string> Between(const char* scaffold, const std::string& body, size_t body_offset,
                            const std::string& open, const std::string& close, FoundSpan* found) {
  const size_t start = body.find(open);
  *found = FoundSpan{start != std::string::npos, start, start};
  if (!found->found) return std::string();
  const size_t inner = start + open.size();
  const size_t end = body.find(close, inner);
  if (end == std::string::npos) {
    return FormatError(scaffold, body_offset + start, open + " is not closed by " + close);
  }
  found->end = end + close.size();
  return body.substr(inner, end - inner);
}

class BashBlockScaffold : public Scaffold {
 public:
  const char* name() const override { return "bash_block"; }

 protected:
  std::string CallSyntax() const override {
    return "To run a command, write it in a bash code block:\n```bash\nCOMMAND\n```";
  }
  std::string WriteCall(const std::string& command) const override {
    return "```bash\n" + command + "\n```";
  }
  Result<std::string> ReadCall(const std::string& body, size_t offset, FoundSpan* found) const override {
    FR_ASSIGN_OR_RETURN(std::string inner, Between(name(), body, offset, "```bash\n", "```", found));
    return Trimmed(inner);
  }
};

class JsonToolsScaffold : public Scaffold {
 public:
  const char* name() const override { return "json_tools"; }

 protected:
  std::string CallSyntax() const override {
    return "To run a command, call the bash tool with a JSON object:\n"
           "<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"COMMAND\"}}\n</tool_call>";
  }
  std::string WriteCall(const std::string& command) const override {
    nlohmann::json call = {{"name", "bash"}, {"arguments", {{"command", command}}}};
    return "<tool_call>\n" + call.dump() + "\n</tool_call>";
  }
  Result<std::string> ReadCall(const std::string& body, size_t offset, FoundSpan* found) const override {
    FR_ASSIGN_OR_RETURN(std::string inner,
                        Between(name(), body, offset, "<tool_call>", "</tool_call>", found));
    if (!found->found) return std::string();
    const size_t at = offset + body.find("<tool_call>") + 11;
    nlohmann::json call = nlohmann::json::parse(inner, nullptr, /*allow_exceptions=*/false);
    if (call.is_discarded()) return FormatError(name(), at, "tool call is not valid JSON");
    if (!call.is_object() || !call.contains("name") || call["name"] != "bash") {
      return FormatError(name(), at, "tool call must name the tool \"bash\"");
    }
    if (!call.contains("arguments") || !call["arguments"].is_object() ||
        !call["arguments"].contains("command") || !call["arguments"]["command"].is_string()) {
      return FormatError(name(), at, "tool call needs arguments.command as a string");
    }
    return Trimmed(call["arguments"]["command"].get<std::string>());
  }
};

class XmlToolsScaffold : public Scaffold {
 public:
  const char* name() const override { return "xml_tools"; }

 protected:
  std::string CallSyntax() const override {
    return "To run a command, write:\n<invoke name=\"bash\">\n<parameter name=\"command\">COMMAND</parameter>\n</invoke>";
  }
  std::string WriteCall(const std::string& command) const override {
    return "<invoke name=\"bash\">\n<parameter name=\"command\">" + command + "</parameter>\n</invoke>";
  }
  Result<std::string> ReadCall(const std::string& body, size_t offset, FoundSpan* found) const override {
    FR_ASSIGN_OR_RETURN(std::string invoke,
                        Between(name(), body, offset, "<invoke name=\"bash\">", "</invoke>", found));
    if (!found->found) return std::string();
    FoundSpan parameter;
    const size_t at = offset + body.find("<invoke name=\"bash\">");
    FR_ASSIGN_OR_RETURN(std::string command,
                        Between(name(), invoke, at, "<parameter name=\"command\">", "</parameter>", &parameter));
    if (!parameter.found) return FormatError(name(), at, "invoke has no <parameter name=\"command\">");
    return Trimmed(command);
  }
};

}  // namespace

std::string Scaffold::SystemPrompt(int effort) const {
  return WithReasoningEffort(
      "You are an agent that solves tasks by running shell commands in a working directory.\n" + CallSyntax() +
          "\nRun one command per message and wait for its output. Think inside <think>...</think> "
          "before each message. When you know the result, reply with <answer>RESULT</answer>.",
      effort);
}

std::string Scaffold::RenderToolCall(const std::string& reasoning, const std::string& command) const {
  return "<think>\n" + reasoning + "\n</think>\n" + WriteCall(command);
}

std::string Scaffold::RenderAnswer(const std::string& reasoning, const std::string& answer) const {
  return "<think>\n" + reasoning + "\n</think>\n<answer>" + answer + "</answer>";
}

std::string Scaffold::RenderToolResult(const ExecResult& result) {
  std::string text = result.stdout_text;
  if (!result.stderr_text.empty()) text += "[stderr]\n" + result.stderr_text;
  if (result.timed_out) text += "[timed out]\n";
  else if (result.exit_code != 0) text += "[exit code " + std::to_string(result.exit_code) + "]\n";
  if (text.empty()) text = "[no output]\n";
  if (text.size() > kMaxToolResultBytes) {
    const size_t cut = text.size() - kMaxToolResultBytes;
    text = text.substr(0, kMaxToolResultBytes) + "\n[... " + std::to_string(cut) + " bytes cut]\n";
  }
  return text;
}

Result<AgentTurn> Scaffold::Parse(const std::string& text) const {
  AgentTurn turn;
  const size_t open = text.find_first_not_of(" \t\r\n");
  if (open == std::string::npos || text.compare(open, 7, "<think>") != 0) {
    return FormatError(name(), open == std::string::npos ? 0 : open, "message must start with <think>");
  }
  const size_t close = text.find("</think>", open + 7);
  if (close == std::string::npos) return FormatError(name(), open, "<think> is not closed by </think>");
  turn.reasoning = Trimmed(text.substr(open + 7, close - open - 7));
  const size_t body_offset = close + 8;
  const std::string body = text.substr(body_offset);

  FoundSpan call, answer;
  FR_ASSIGN_OR_RETURN(turn.command, ReadCall(body, body_offset, &call));
  FR_ASSIGN_OR_RETURN(turn.final_answer, Between(name(), body, body_offset, "<answer>", "</answer>", &answer));
  turn.final_answer = Trimmed(turn.final_answer);
  turn.has_answer = answer.found;
  const bool has_call = call.found;
  const FoundSpan& action = has_call ? call : answer;
  turn.action_begin = body_offset + action.begin;
  turn.action_end = body_offset + action.end;
  if (has_call && turn.has_answer) {
    return FormatError(name(), body_offset, "a message holds either a tool call or an <answer>, not both");
  }
  if (!has_call && !turn.has_answer) {
    return FormatError(name(), body_offset, "no tool call and no <answer> after </think>");
  }
  if (has_call && turn.command.empty()) return FormatError(name(), body_offset, "the tool call has an empty command");
  return turn;
}

std::vector<const Scaffold*> Scaffolds() {
  static const BashBlockScaffold bash_block;
  static const JsonToolsScaffold json_tools;
  static const XmlToolsScaffold xml_tools;
  return {&bash_block, &json_tools, &xml_tools};
}

const Scaffold* FindScaffold(const std::string& name) {
  for (const Scaffold* scaffold : Scaffolds()) {
    if (name == scaffold->name()) return scaffold;
  }
  return nullptr;
}

}  // namespace flashroll
