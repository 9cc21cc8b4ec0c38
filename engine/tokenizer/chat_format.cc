#include "engine/tokenizer/chat_format.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "engine/tokenizer/unicode.h"

namespace flashroll::engine {

namespace {

using OrderedJson = nlohmann::ordered_json;

void DumpString(const std::string& s, std::string* out) {
  static const char kHex[] = "0123456789abcdef";
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (c < 0x20) {
          *out += "\\u00";
          out->push_back(kHex[c >> 4]);
          out->push_back(kHex[c & 15]);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

void Dump(const OrderedJson& v, int indent, int depth, std::string* out) {
  auto newline = [&](int d) {
    out->push_back('\n');
    out->append(static_cast<size_t>(indent * d), ' ');
  };
  if (v.is_object()) {
    if (v.empty()) {
      *out += "{}";
      return;
    }
    out->push_back('{');
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) *out += indent >= 0 ? "," : ", ";
      first = false;
      if (indent >= 0) newline(depth + 1);
      DumpString(it.key(), out);
      *out += ": ";
      Dump(it.value(), indent, depth + 1, out);
    }
    if (indent >= 0) newline(depth);
    out->push_back('}');
  } else if (v.is_array()) {
    if (v.empty()) {
      *out += "[]";
      return;
    }
    out->push_back('[');
    bool first = true;
    for (const auto& e : v) {
      if (!first) *out += indent >= 0 ? "," : ", ";
      first = false;
      if (indent >= 0) newline(depth + 1);
      Dump(e, indent, depth + 1, out);
    }
    if (indent >= 0) newline(depth);
    out->push_back(']');
  } else if (v.is_string()) {
    DumpString(v.get<std::string>(), out);
  } else if (v.is_boolean()) {
    *out += v.get<bool>() ? "true" : "false";
  } else if (v.is_null()) {
    *out += "null";
  } else {
    *out += v.dump();  // numbers: shortest round-trip form, like Python's repr
  }
}

// Jinja's `trim` (Python str.strip()).
std::string_view Trim(std::string_view s) {
  auto space_at = [&](size_t pos, size_t* len) {
    uint32_t cp = DecodeUtf8(s, pos, len);
    return cp != kInvalidCodepoint && (IsWhitespace(cp) || (cp >= 0x1C && cp <= 0x1F));
  };
  size_t begin = 0;
  size_t len;
  while (begin < s.size() && space_at(begin, &len)) begin += len;
  size_t end = s.size();
  while (end > begin) {
    // Step back over one code point.
    size_t start = end - 1;
    while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    if (!space_at(start, &len) || start + len != end) break;
    end = start;
  }
  return s.substr(begin, end - begin);
}

// The literal system prompt a ChatML template inserts when the conversation
// has none: the text of a '<|im_start|>system\n...<|im_end|>' string literal
// (the newline written as an escape or as a real newline).
std::string DefaultSystemPrompt(std::string_view tmpl) {
  static constexpr std::string_view kMarkers[] = {"<|im_start|>system\\n", "<|im_start|>system\n"};
  for (std::string_view marker : kMarkers) {
    for (size_t pos = tmpl.find(marker); pos != std::string_view::npos; pos = tmpl.find(marker, pos + 1)) {
      size_t start = pos + marker.size();
      size_t end = tmpl.find("<|im_end|>", start);
      if (end == std::string_view::npos) break;
      std::string_view lit = tmpl.substr(start, end - start);
      if (lit.empty() || lit.find_first_of("'\"{}+") != std::string_view::npos) continue;
      std::string out;
      for (size_t i = 0; i < lit.size(); ++i) {
        if (lit[i] == '\\' && i + 1 < lit.size() && lit[i + 1] == 'n') {
          out.push_back('\n');
          ++i;
        } else {
          out.push_back(lit[i]);
        }
      }
      return out;
    }
  }
  return {};
}

Result<int32_t> RequireToken(const Tokenizer& tok, std::string_view text) {
  int32_t id = tok.TokenId(text);
  if (id < 0) {
    return Status::InvalidArgument("chat format: the vocabulary has no token '" + std::string(text) + "'");
  }
  return id;
}

}  // namespace

Result<std::string> PythonJson(std::string_view json_text, int indent, std::string_view what) {
  OrderedJson v = OrderedJson::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded()) return Status::InvalidArgument(std::string(what) + ": not valid JSON");
  std::string out;
  Dump(v, indent, 0, &out);
  return out;
}

Result<std::unique_ptr<ChatFormat>> ChatFormat::FromTemplate(std::string_view chat_template,
                                                             const Tokenizer& tokenizer, Options options) {
  std::unique_ptr<ChatFormat> f(new ChatFormat(tokenizer));
  f->date_string_ = std::move(options.date_string);
  if (chat_template.find("<|im_start|>") != std::string_view::npos) {
    f->kind_ = ChatFormatKind::kChatMl;
    FR_ASSIGN_OR_RETURN(f->turn_start_, RequireToken(tokenizer, "<|im_start|>"));
    FR_ASSIGN_OR_RETURN(f->turn_end_, RequireToken(tokenizer, "<|im_end|>"));
    f->stop_tokens_ = {f->turn_end_};
    f->default_system_ = DefaultSystemPrompt(chat_template);
    // Qwen2.5's tool convention; other ChatML templates render tools differently.
    f->supports_tools_ =
        chat_template.find("You may call one or more functions to assist with the user query.") !=
            std::string_view::npos &&
        chat_template.find("<tool_response>") != std::string_view::npos;
  } else if (chat_template.find("<|start_header_id|>") != std::string_view::npos) {
    f->kind_ = ChatFormatKind::kLlama3;
    FR_ASSIGN_OR_RETURN(f->turn_start_, RequireToken(tokenizer, "<|start_header_id|>"));
    FR_ASSIGN_OR_RETURN(f->header_end_, RequireToken(tokenizer, "<|end_header_id|>"));
    FR_ASSIGN_OR_RETURN(f->turn_end_, RequireToken(tokenizer, "<|eot_id|>"));
    f->stop_tokens_ = {f->turn_end_};
    int32_t eom = tokenizer.TokenId("<|eom_id|>");
    if (eom >= 0) f->stop_tokens_.push_back(eom);
    if (chat_template.find("bos_token") != std::string_view::npos) f->bos_ = tokenizer.bos_id();
    f->llama31_ = chat_template.find("Cutting Knowledge Date") != std::string_view::npos;
    f->supports_tools_ = f->llama31_ && chat_template.find("Environment: ipython") != std::string_view::npos;
  } else {
    return Status::Unimplemented(
        "chat format: template not recognised (supported: ChatML with <|im_start|>, Llama 3 with "
        "<|start_header_id|>)");
  }
  return f;
}

Result<std::unique_ptr<ChatConversation>> ChatConversation::Create(const ChatFormat& format,
                                                                   const std::vector<std::string>& tools_json) {
  std::unique_ptr<ChatConversation> c(new ChatConversation(format));
  if (!tools_json.empty() && !format.supports_tools()) {
    return Status::Unimplemented("chat format: this template does not render tool definitions");
  }
  for (size_t i = 0; i < tools_json.size(); ++i) {
    std::string what = "tools[" + std::to_string(i) + "]";
    FR_ASSIGN_OR_RETURN(std::string compact, PythonJson(tools_json[i], -1, what));
    FR_ASSIGN_OR_RETURN(std::string indented, PythonJson(tools_json[i], 4, what));
    c->tools_.push_back(std::move(compact));
    c->tools_indented_.push_back(std::move(indented));
  }
  return c;
}

void ChatConversation::Special(int32_t id) {
  tokens_.push_back(id);
  pending_text_.clear();
  pending_start_ = tokens_.size();
}

void ChatConversation::Text(std::string_view text) {
  // The run since the last special token is re-tokenised as a whole, as the
  // full rendered string would be; earlier runs are never touched.
  pending_text_ += text;
  tokens_.resize(pending_start_);
  format_.tokenizer().EncodeAppend(pending_text_, /*parse_special=*/false, &tokens_);
}

void ChatConversation::CloseToolBlock() {
  if (!tool_block_open_) return;
  Special(format_.turn_end_);
  Text("\n");
  tool_block_open_ = false;
}

Status ChatConversation::Preamble(const ChatMessage* first, bool* consumed) {
  *consumed = false;
  started_ = true;
  const ChatFormat& f = format_;
  bool first_is_system = first != nullptr && first->role == "system";
  if (f.kind_ == ChatFormatKind::kChatMl) {
    if (!tools_.empty()) {
      std::string text = "system\n";
      text += first_is_system ? first->content : f.default_system_;
      text +=
          "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
          "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
      for (const std::string& t : tools_) text += "\n" + t;
      text +=
          "\n</tools>\n\nFor each function call, return a json object with function name and "
          "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
          "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>";
      Special(f.turn_start_);
      Text(text);
      Special(f.turn_end_);
      Text("\n");
      *consumed = first_is_system;
    } else if (!first_is_system && !f.default_system_.empty()) {
      Special(f.turn_start_);
      Text("system\n" + f.default_system_);
      Special(f.turn_end_);
      Text("\n");
    }
    return Status::Ok();
  }
  // Llama 3.
  if (f.bos_ >= 0) Special(f.bos_);
  if (!f.llama31_) return Status::Ok();
  std::string text = "\n\n";
  if (!tools_.empty()) text += "Environment: ipython\n";
  text += "Cutting Knowledge Date: December 2023\nToday Date: " + f.date_string_ + "\n\n";
  if (first_is_system) text += Trim(first->content);
  Special(f.turn_start_);
  Text("system");
  Special(f.header_end_);
  Text(text);
  Special(f.turn_end_);
  *consumed = first_is_system;
  tools_user_pending_ = !tools_.empty();
  return Status::Ok();
}

Status ChatConversation::Append(const ChatMessage& m) {
  if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool") {
    return Status::InvalidArgument("chat message: unknown role '" + m.role + "'");
  }
  if (!m.tool_calls.empty() && m.role != "assistant") {
    return Status::InvalidArgument("chat message: tool_calls on a '" + m.role + "' message");
  }
  if (!started_) {
    bool consumed = false;
    FR_RETURN_IF_ERROR(Preamble(&m, &consumed));
    if (consumed) return Status::Ok();
  }
  return format_.kind_ == ChatFormatKind::kChatMl ? AppendChatMl(m) : AppendLlama3(m);
}

Status ChatConversation::AppendChatMl(const ChatMessage& m) {
  const ChatFormat& f = format_;
  if (!f.supports_tools_ && !m.tool_calls.empty()) {
    return Status::InvalidArgument("chat message: this ChatML template cannot render tool calls");
  }
  // Templates without Qwen2.5's tool convention render a tool result as a
  // plain "tool" turn.
  if (m.role == "tool" && f.supports_tools_) {
    if (!tool_block_open_) {
      Special(f.turn_start_);
      Text("user");
      tool_block_open_ = true;
    }
    Text("\n<tool_response>\n" + m.content + "\n</tool_response>");
    return Status::Ok();
  }
  CloseToolBlock();
  std::string text = m.role;
  if (m.role == "assistant" && !m.tool_calls.empty()) {
    if (!m.content.empty()) text += "\n" + m.content;
    for (size_t i = 0; i < m.tool_calls.size(); ++i) {
      const ChatToolCall& call = m.tool_calls[i];
      FR_ASSIGN_OR_RETURN(std::string args,
                          PythonJson(call.arguments, -1, "tool_calls[" + std::to_string(i) + "].arguments"));
      text += "\n<tool_call>\n{\"name\": \"" + call.name + "\", \"arguments\": " + args + "}\n</tool_call>";
    }
  } else {
    text += "\n" + m.content;
  }
  Special(f.turn_start_);
  Text(text);
  Special(f.turn_end_);
  Text("\n");
  return Status::Ok();
}

Status ChatConversation::AppendLlama3(const ChatMessage& m) {
  const ChatFormat& f = format_;
  auto header = [&](std::string_view role) {
    Special(f.turn_start_);
    Text(role);
    Special(f.header_end_);
  };
  if (tools_user_pending_) {
    if (m.role != "user") {
      return Status::InvalidArgument("chat message: with tools, Llama 3.1 needs a user message first, got '" +
                                     m.role + "'");
    }
    std::string text =
        "\n\nGiven the following functions, please respond with a JSON for a function call with its "
        "proper arguments that best answers the given prompt.\n\nRespond in the format {\"name\": "
        "function name, \"parameters\": dictionary of argument name and its value}.Do not use "
        "variables.\n\n";
    for (const std::string& t : tools_indented_) text += t + "\n\n";
    text += Trim(m.content);
    header("user");
    Text(text);
    Special(f.turn_end_);
    tools_user_pending_ = false;
    return Status::Ok();
  }
  if (m.role == "tool") {
    if (!f.llama31_) return Status::InvalidArgument("chat message: this Llama 3 template has no tool role");
    // The 3.1 template tests `content is iterable`, which holds for strings,
    // so a text result is rendered through tojson: as a quoted JSON string.
    std::string quoted;
    nlohmann::ordered_json s = m.content;
    Dump(s, -1, 0, &quoted);
    header("ipython");
    Text("\n\n" + quoted);
    Special(f.turn_end_);
    return Status::Ok();
  }
  if (!m.tool_calls.empty()) {
    if (!f.llama31_) return Status::InvalidArgument("chat message: this Llama 3 template has no tool calls");
    if (m.tool_calls.size() != 1) {
      return Status::InvalidArgument("chat message: Llama 3.1 supports one tool call per message, got " +
                                     std::to_string(m.tool_calls.size()));
    }
    FR_ASSIGN_OR_RETURN(std::string args, PythonJson(m.tool_calls[0].arguments, -1, "tool_calls[0].arguments"));
    header("assistant");
    Text("\n\n{\"name\": \"" + m.tool_calls[0].name + "\", \"parameters\": " + args + "}");
    Special(f.turn_end_);
    return Status::Ok();
  }
  header(m.role);
  Text("\n\n" + std::string(Trim(m.content)));
  Special(f.turn_end_);
  return Status::Ok();
}

Status ChatConversation::AppendGenerationPrompt() {
  if (!started_) {
    bool consumed = false;
    FR_RETURN_IF_ERROR(Preamble(nullptr, &consumed));
  }
  if (tools_user_pending_) {
    return Status::InvalidArgument("chat conversation: with tools, Llama 3.1 needs a user message first");
  }
  const ChatFormat& f = format_;
  if (f.kind_ == ChatFormatKind::kChatMl) {
    CloseToolBlock();
    Special(f.turn_start_);
    Text("assistant\n");
  } else {
    Special(f.turn_start_);
    Text("assistant");
    Special(f.header_end_);
    Text("\n\n");
  }
  return Status::Ok();
}

Status ChatConversation::AppendGenerated(std::span<const int32_t> ids) {
  const ChatFormat& f = format_;
  for (int32_t id : ids) {
    if (id < 0 || id >= f.tokenizer().vocab_size()) {
      return Status::InvalidArgument("chat conversation: generated token id " + std::to_string(id) +
                                     " outside the vocabulary");
    }
  }
  tokens_.insert(tokens_.end(), ids.begin(), ids.end());
  bool closed = !ids.empty() && std::find(f.stop_tokens_.begin(), f.stop_tokens_.end(), ids.back()) !=
                                    f.stop_tokens_.end();
  if (!closed) tokens_.push_back(f.turn_end_);
  pending_text_.clear();
  pending_start_ = tokens_.size();
  if (f.kind_ == ChatFormatKind::kChatMl) Text("\n");
  return Status::Ok();
}

}  // namespace flashroll::engine
