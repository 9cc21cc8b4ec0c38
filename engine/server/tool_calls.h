// Tool calls in an assistant message's text, in the model's chat format:
//   ChatML (Qwen2.5, the default models): one or more
//     <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
//     blocks; the text outside them is the message's content;
//   Llama 3.1: the whole message is {"name": "f", "parameters": {...}}
//     (optionally after <|python_tag|>).
// A block whose JSON does not parse, or lacks a name, stays in the content:
// the client sees what the model wrote rather than nothing.
//
// Thread safety: free functions, reentrant.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/chat_format.h"

namespace flashroll::engine {

struct ParsedToolCalls {
  std::string content;                 // the text outside the calls, trimmed
  std::vector<ChatToolCall> calls;     // arguments as compact JSON text
};

ParsedToolCalls ParseToolCalls(ChatFormatKind kind, std::string_view text);

// For streaming: how many leading bytes of `text` (an unfinished message)
// are content for certain — they hold no tool call and no start of one (a
// partial "<tool_call>" at the end is held back).
size_t ToolCallFreeLength(ChatFormatKind kind, std::string_view text);

// The calls written as the model writes them, for templates that do not
// render tool calls themselves: ChatML blocks joined by "\n", or the Llama
// 3.1 JSON object.
std::string ToolCallsAsText(ChatFormatKind kind, const std::vector<ChatToolCall>& calls);

}  // namespace flashroll::engine
