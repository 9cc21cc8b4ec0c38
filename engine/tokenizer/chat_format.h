// Chat formats: conversations rendered directly as token ids.
//
// Two families are recognised from a model's chat_template string:
//   - ChatML (Qwen2/Qwen2.5): <|im_start|>role\n...<|im_end|>\n, tools in the
//     system turn, tool calls as <tool_call> JSON, consecutive tool results
//     in one user turn of <tool_response> blocks;
//   - Llama 3 / 3.1: <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
//     after BOS; with 3.1 templates the system preamble (knowledge cut-off,
//     date) and tools in the first user turn, tool calls as
//     {"name": ..., "parameters": ...} and tool results as ipython turns.
// The output equals Hugging Face's apply_chat_template(tokenize=True) for
// the same messages: text between special tokens is tokenized as one run,
// exactly where the full rendered string would be split. One deliberate
// difference: special-token text inside message content is never parsed as
// a special token (a tool output cannot inject <|im_end|>).
//
// ChatConversation appends turns to a growing token sequence, so a
// multi-turn caller (the agent loop) never re-tokenises earlier turns and
// keeps sampled tokens verbatim.
//
// Thread safety: a ChatFormat is immutable and may be shared; a
// ChatConversation is not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/tokenizer/tokenizer.h"

namespace flashroll::engine {

struct ChatToolCall {
  std::string name;
  std::string arguments;  // JSON text, normally an object: {"city": "Paris"}
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" or "tool"
  std::string content;
  std::vector<ChatToolCall> tool_calls;  // assistant messages only
};

enum class ChatFormatKind {
  kChatMl,
  kLlama3,
};

class ChatFormat {
 public:
  struct Options {
    // "Today Date" of the Llama 3.1 preamble (the template's own default).
    std::string date_string = "26 Jul 2024";
  };

  // Recognises `chat_template` and looks up the format's special tokens in
  // `tokenizer` (which must outlive the format). Errors: kUnimplemented for
  // an unknown template, kInvalidArgument when a special token is missing.
  static Result<std::unique_ptr<ChatFormat>> FromTemplate(std::string_view chat_template,
                                                          const Tokenizer& tokenizer, Options options);
  static Result<std::unique_ptr<ChatFormat>> FromTemplate(std::string_view chat_template,
                                                          const Tokenizer& tokenizer) {
    return FromTemplate(chat_template, tokenizer, Options());
  }

  ChatFormatKind kind() const { return kind_; }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  // Tokens that end an assistant turn (<|im_end|>; <|eot_id|>, <|eom_id|>).
  const std::vector<int32_t>& stop_tokens() const { return stop_tokens_; }
  // True when the template renders tool definitions.
  bool supports_tools() const { return supports_tools_; }

 private:
  friend class ChatConversation;
  ChatFormat(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

  const Tokenizer& tokenizer_;
  ChatFormatKind kind_ = ChatFormatKind::kChatMl;
  bool supports_tools_ = false;
  bool llama31_ = false;         // Llama 3.1 preamble and tool conventions
  std::string default_system_;   // ChatML: system prompt used when none is given
  std::string date_string_;
  int32_t bos_ = -1;
  int32_t turn_start_ = -1;      // <|im_start|> / <|start_header_id|>
  int32_t header_end_ = -1;      // <|end_header_id|>
  int32_t turn_end_ = -1;        // <|im_end|> / <|eot_id|>
  std::vector<int32_t> stop_tokens_;
};

class ChatConversation {
 public:
  // `tools_json`: OpenAI-style tool definitions ({"type": "function",
  // "function": {...}}), each a JSON text. Fails (kInvalidArgument naming
  // the tool index) on invalid JSON, kUnimplemented if the format has no
  // tool support. `format` must outlive the conversation.
  static Result<std::unique_ptr<ChatConversation>> Create(const ChatFormat& format,
                                                          const std::vector<std::string>& tools_json);

  // Appends one message. The first call also renders the preamble (BOS,
  // system turn, tool definitions). Errors (kInvalidArgument): unknown role,
  // tool-call arguments that are not JSON, a message the format cannot
  // express (Llama 3.1: several tool calls in one message, a non-user first
  // message when tools are given).
  Status Append(const ChatMessage& message);

  // Appends the assistant generation prompt ("<|im_start|>assistant\n").
  Status AppendGenerationPrompt();

  // Appends the tokens the model sampled for the assistant turn opened by
  // AppendGenerationPrompt(), verbatim; closes the turn with the
  // end-of-turn token if the model did not (a truncated sample) and with
  // whatever the template puts after it.
  Status AppendGenerated(std::span<const int32_t> ids);

  // The conversation so far. The tokens after the last special token may
  // still change while a ChatML run of tool results is open.
  const std::vector<int32_t>& tokens() const { return tokens_; }

 private:
  ChatConversation(const ChatFormat& format) : format_(format) {}
  Status Preamble(const ChatMessage* first, bool* consumed);
  void Special(int32_t id);
  void Text(std::string_view text);
  Status AppendChatMl(const ChatMessage& m);
  Status AppendLlama3(const ChatMessage& m);
  void CloseToolBlock();

  const ChatFormat& format_;
  std::vector<std::string> tools_;  // tool definitions, already rendered as JSON text (Python style)
  std::vector<std::string> tools_indented_;  // the same with indent=4 (Llama 3.1)
  std::vector<int32_t> tokens_;
  std::string pending_text_;  // text after the last special token
  size_t pending_start_ = 0;  // index in tokens_ where pending_text_'s tokens begin
  bool started_ = false;
  bool tools_user_pending_ = false;  // Llama 3.1: tools go into the next user turn
  bool tool_block_open_ = false;     // ChatML: <|im_start|>user of tool responses not closed
};

// Serialises JSON the way Python's json.dumps(ensure_ascii=False) does, as
// chat templates' `tojson` filter produces it: ", " and ": " separators, or
// with `indent` >= 0 newlines and that many spaces per level; keys in input
// order. Returns kInvalidArgument naming `what` if `json_text` is not JSON.
Result<std::string> PythonJson(std::string_view json_text, int indent, std::string_view what);

}  // namespace flashroll::engine
