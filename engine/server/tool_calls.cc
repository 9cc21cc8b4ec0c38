#include "engine/server/tool_calls.h"

#include <optional>

#include "common/json.h"
#include "common/strings.h"

namespace flashroll::engine {
namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";

// {"name": ..., "arguments"|"parameters": ...} as a call; nullopt otherwise.
std::optional<ChatToolCall> CallFromJson(std::string_view text) {
  Result<Json> parsed = ParseJson(TrimWhitespace(text));
  if (!parsed.ok() || !parsed->is_object()) return std::nullopt;
  auto name = parsed->find("name");
  if (name == parsed->end() || !name->is_string() || name->get<std::string>().empty()) return std::nullopt;
  ChatToolCall call;
  call.name = name->get<std::string>();
  auto args = parsed->find("arguments");
  if (args == parsed->end()) args = parsed->find("parameters");
  if (args == parsed->end() || args->is_null()) {
    call.arguments = "{}";
  } else if (args->is_string()) {
    call.arguments = args->get<std::string>();  // already JSON text, as OpenAI sends it
  } else {
    call.arguments = DumpJson(*args);
  }
  return call;
}

}  // namespace

ParsedToolCalls ParseToolCalls(ChatFormatKind kind, std::string_view text) {
  ParsedToolCalls out;
  if (kind == ChatFormatKind::kLlama3) {
    std::string_view body = TrimWhitespace(text);
    if (body.substr(0, kPythonTag.size()) == kPythonTag) body.remove_prefix(kPythonTag.size());
    if (std::optional<ChatToolCall> call = CallFromJson(body)) {
      out.calls.push_back(std::move(*call));
    } else {
      out.content = std::string(TrimWhitespace(text));
    }
    return out;
  }
  std::string content;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t open = text.find(kOpen, pos);
    if (open == std::string_view::npos) {
      content += text.substr(pos);
      break;
    }
    const size_t body = open + kOpen.size();
    size_t close = text.find(kClose, body);
    // A call cut short (max_tokens) still counts when its JSON is whole.
    const size_t end = close == std::string_view::npos ? text.size() : close;
    std::optional<ChatToolCall> call = CallFromJson(text.substr(body, end - body));
    const size_t next = close == std::string_view::npos ? text.size() : close + kClose.size();
    if (call) {
      content += text.substr(pos, open - pos);
      out.calls.push_back(std::move(*call));
    } else {
      content += text.substr(pos, next - pos);
    }
    pos = next;
  }
  out.content = std::string(TrimWhitespace(content));
  return out;
}

size_t ToolCallFreeLength(ChatFormatKind kind, std::string_view text) {
  if (kind == ChatFormatKind::kLlama3) {
    // A call is the whole message: nothing is certain until it ends, unless
    // the message visibly starts as prose.
    std::string_view body = TrimWhitespace(text);
    if (body.empty()) return 0;
    if (body[0] == '{' || kPythonTag.substr(0, std::min(body.size(), kPythonTag.size())) ==
                              body.substr(0, std::min(body.size(), kPythonTag.size()))) {
      return 0;
    }
    return text.size();
  }
  const size_t open = text.find(kOpen);
  if (open != std::string_view::npos) return open;
  // Hold back a suffix that could still become "<tool_call>".
  for (size_t keep = std::min(text.size(), kOpen.size() - 1); keep > 0; --keep) {
    if (text.substr(text.size() - keep) == kOpen.substr(0, keep)) return text.size() - keep;
  }
  return text.size();
}

std::string ToolCallsAsText(ChatFormatKind kind, const std::vector<ChatToolCall>& calls) {
  std::string out;
  for (size_t i = 0; i < calls.size(); ++i) {
    const ChatToolCall& call = calls[i];
    // Key order as the model writes it: name first (nlohmann's Json would sort).
    Result<std::string> args = PythonJson(call.arguments, -1, "arguments");
    const std::string json = "{\"name\": " + DumpJson(Json(call.name)) + ", \"" +
                             (kind == ChatFormatKind::kLlama3 ? "parameters" : "arguments") +
                             "\": " + (args.ok() ? *args : DumpJson(Json(call.arguments))) + "}";
    if (kind == ChatFormatKind::kLlama3) {
      out += (i ? "\n" : "") + json;
    } else {
      out += (i ? "\n" : "") + std::string(kOpen) + "\n" + json + "\n" + std::string(kClose);
    }
  }
  return out;
}

}  // namespace flashroll::engine
