#include "engine/server/openai_request.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <random>

#include "common/base64.h"
#include "common/reasoning_effort.h"
#include "common/http.h"

namespace flashroll::engine {

std::optional<ApiError> ReadTokenIds(const Json& body, const char* key, std::vector<int32_t>* out);

namespace {

constexpr int32_t kMaxN = 128;
constexpr size_t kMaxStops = 16;

// The error for a failed JsonView read: its message starts with the path.
ApiError FieldError(const std::string& path, const Status& status) {
  ApiError e;
  e.param = path;
  e.message = status.message();
  return e;
}

// The field `key` of `body` when present and not null.
const Json* Find(const Json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<ApiError> ReadString(const Json& body, const char* key, std::string* out) {
  const Json* v = Find(body, key);
  if (v == nullptr) return std::nullopt;
  Result<std::string> s = JsonView(*v, key).AsString();
  if (!s.ok()) return FieldError(key, s.status());
  *out = *s;
  return std::nullopt;
}

std::optional<ApiError> ReadBool(const Json& body, const char* key, bool* out) {
  const Json* v = Find(body, key);
  if (v == nullptr) return std::nullopt;
  Result<bool> b = JsonView(*v, key).AsBool();
  if (!b.ok()) return FieldError(key, b.status());
  *out = *b;
  return std::nullopt;
}

// An integer in [lo, hi]; *present says whether the field was there.
std::optional<ApiError> ReadInt(const Json& body, const char* key, int64_t lo, int64_t hi, int64_t* out,
                                bool* present = nullptr) {
  if (present) *present = false;
  const Json* v = Find(body, key);
  if (v == nullptr) return std::nullopt;
  Result<int64_t> i = JsonView(*v, key).AsInt();
  if (!i.ok()) return FieldError(key, i.status());
  if (*i < lo) return InvalidRequest(key, "must be at least " + std::to_string(lo) + ", got " + std::to_string(*i));
  if (*i > hi) return InvalidRequest(key, "must be at most " + std::to_string(hi) + ", got " + std::to_string(*i));
  *out = *i;
  if (present) *present = true;
  return std::nullopt;
}

std::string FormatNumber(double v) {
  Json j = v;
  return j.dump();
}

// A finite number in [lo, hi] (or (lo, hi] when lo_open).
std::optional<ApiError> ReadDouble(const Json& body, const char* key, double lo, double hi, bool lo_open,
                                   double* out) {
  const Json* v = Find(body, key);
  if (v == nullptr) return std::nullopt;
  Result<double> d = JsonView(*v, key).AsDouble();
  if (!d.ok()) return FieldError(key, d.status());
  const bool below = lo_open ? !(*d > lo) : !(*d >= lo);
  if (below || !(*d <= hi)) {
    return InvalidRequest(key, std::string("must be in ") + (lo_open ? "(" : "[") + FormatNumber(lo) + ", " +
                                   FormatNumber(hi) + "], got " + v->dump());
  }
  *out = *d;
  return std::nullopt;
}

uint64_t RandomSeed() {
  static std::atomic<uint64_t> counter{std::random_device{}() ^
                                       static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count())};
  // splitmix64 over a counter: distinct, well-mixed seeds from any thread.
  uint64_t z = counter.fetch_add(0x9e3779b97f4a7c15ull) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The fields both endpoints share. `chat` picks the chat spellings of
// logprobs (a boolean plus top_logprobs) and max_completion_tokens.
std::optional<ApiError> ReadGenerationParams(const Json& body, bool chat, GenerationParams* p) {
  if (!body.contains("model") || body["model"].is_null()) return InvalidRequest("model", "missing");
  if (auto e = ReadString(body, "model", &p->model)) return e;

  int64_t max_tokens = 0;
  bool present = false;
  if (auto e = ReadInt(body, "max_tokens", 1, INT32_MAX, &max_tokens, &present)) return e;
  if (present) p->max_tokens = max_tokens;
  if (chat) {
    if (auto e = ReadInt(body, "max_completion_tokens", 1, INT32_MAX, &max_tokens, &present)) return e;
    if (present) p->max_tokens = max_tokens;
  }

  int64_t n = 1;
  if (auto e = ReadInt(body, "n", 1, kMaxN, &n)) return e;
  p->n = static_cast<int32_t>(n);
  if (const Json* best_of = Find(body, "best_of")) {
    if (!best_of->is_number_integer() || best_of->get<int64_t>() != n) {
      return InvalidRequest("best_of", "only best_of equal to n is supported");
    }
  }
  if (auto e = ReadBool(body, "stream", &p->stream)) return e;
  if (const Json* options = Find(body, "stream_options")) {
    if (!options->is_object()) return InvalidRequest("stream_options", "expected an object");
    if (auto e = ReadBool(*options, "include_usage", &p->include_usage)) {
      e->param = "stream_options.include_usage";
      e->message = "stream_options." + e->message;
      return e;
    }
  }

  SamplingParams& s = p->sampling;
  if (auto e = ReadDouble(body, "temperature", 0, 2, false, &s.temperature)) return e;
  if (auto e = ReadDouble(body, "top_p", 0, 1, true, &s.top_p)) return e;
  int64_t top_k = 0;
  if (auto e = ReadInt(body, "top_k", -1, INT32_MAX, &top_k)) return e;
  s.top_k = top_k < 0 ? 0 : static_cast<int32_t>(top_k);
  if (auto e = ReadDouble(body, "min_p", 0, 1, false, &s.min_p)) return e;
  if (auto e = ReadDouble(body, "presence_penalty", -2, 2, false, &s.presence_penalty)) return e;
  if (auto e = ReadDouble(body, "frequency_penalty", -2, 2, false, &s.frequency_penalty)) return e;
  if (auto e = ReadDouble(body, "repetition_penalty", 0, 100, true, &s.repetition_penalty)) return e;
  if (const Json* seed = Find(body, "seed")) {
    Result<int64_t> v = JsonView(*seed, "seed").AsInt();
    if (!v.ok()) {
      Result<uint64_t> u = JsonView(*seed, "seed").AsUint();
      if (!u.ok()) return FieldError("seed", v.status());
      s.seed = *u;
    } else {
      s.seed = static_cast<uint64_t>(*v);
    }
  } else {
    s.seed = RandomSeed();
  }

  if (const Json* stop = Find(body, "stop")) {
    if (stop->is_string()) {
      p->stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      Result<std::vector<std::string>> list = JsonView(*stop, "stop").AsStringArray();
      if (!list.ok()) return FieldError("stop", list.status());
      p->stop = *list;
    } else {
      return InvalidRequest("stop", std::string("expected a string or an array of strings, got ") + stop->type_name());
    }
    if (p->stop.size() > kMaxStops) {
      return InvalidRequest("stop", "at most " + std::to_string(kMaxStops) + " stop strings, got " +
                                        std::to_string(p->stop.size()));
    }
    for (const std::string& one : p->stop) {
      if (one.empty()) return InvalidRequest("stop", "a stop string is empty");
    }
  }

  if (chat) {
    if (auto e = ReadBool(body, "logprobs", &p->logprobs)) return e;
    int64_t top = 0;
    bool top_present = false;
    if (auto e = ReadInt(body, "top_logprobs", 0, kMaxTopLogprobs, &top, &top_present)) return e;
    if (top_present && top > 0 && !p->logprobs) {
      return InvalidRequest("top_logprobs", "needs \"logprobs\": true");
    }
    p->top_logprobs = static_cast<int32_t>(top);
  } else if (const Json* logprobs = Find(body, "logprobs")) {
    // Legacy completions: logprobs is the number of alternatives (0-20).
    if (logprobs->is_boolean()) {
      p->logprobs = logprobs->get<bool>();
    } else {
      int64_t top = 0;
      if (auto e = ReadInt(body, "logprobs", 0, kMaxTopLogprobs, &top)) return e;
      p->logprobs = true;
      p->top_logprobs = static_cast<int32_t>(top);
    }
  }
  s.top_logprobs = p->top_logprobs;

  if (auto e = ReadBool(body, "return_token_ids", &p->return_token_ids)) return e;
  if (auto e = ReadBool(body, "ignore_eos", &p->ignore_eos)) return e;
  if (Find(body, "stop_token_ids") != nullptr) {
    if (auto e = ReadTokenIds(body, "stop_token_ids", &p->stop_token_ids)) return e;
  }
  if (auto e = ReadBool(body, "return_routing", &p->return_routing)) return e;
  if (p->return_routing && p->stream) {
    return InvalidRequest("return_routing", "not with \"stream\": true (the routing comes with the whole reply)");
  }
  if (Find(body, "routing_format") != nullptr) {
    std::string format;
    if (auto e = ReadString(body, "routing_format", &format)) return e;
    if (format != "json" && format != "binary") {
      return InvalidRequest("routing_format", "expected \"json\" or \"binary\", got \"" + format + "\"");
    }
    if (!p->return_routing) return InvalidRequest("routing_format", "needs \"return_routing\": true");
    p->routing_binary = format == "binary";
  }

  int64_t version = 0;
  if (auto e = ReadInt(body, "min_version", 0, INT64_MAX, &version, &present)) return e;
  if (present) p->min_version = version;
  int64_t timeout_ms = 0;
  if (auto e = ReadInt(body, "min_version_timeout_ms", 0, INT32_MAX, &timeout_ms, &present)) return e;
  if (present) {
    if (!p->min_version) return InvalidRequest("min_version_timeout_ms", "needs min_version");
    p->min_version_timeout = std::chrono::milliseconds(timeout_ms);
  }
  if (auto e = ReadBool(body, "pin_version", &p->pin_version)) return e;

  if (const Json* bias = Find(body, "logit_bias")) {
    if (!bias->is_object()) return InvalidRequest("logit_bias", "expected an object");
    if (!bias->empty()) return InvalidRequest("logit_bias", "not supported");
  }
  if (const Json* format = Find(body, "response_format")) {
    if (!format->is_object() || format->value("type", std::string()) != "text") {
      return InvalidRequest("response_format", "only {\"type\": \"text\"} is supported");
    }
  }
  return std::nullopt;
}

// One message's content: a string, null, or text parts.
std::optional<ApiError> ReadContent(const Json& message, const std::string& path, std::string* out) {
  const Json* content = Find(message, "content");
  if (content == nullptr) return std::nullopt;
  if (content->is_string()) {
    *out = content->get<std::string>();
    return std::nullopt;
  }
  if (!content->is_array()) {
    return InvalidRequest(path + ".content",
                          std::string("expected a string or an array of parts, got ") + content->type_name());
  }
  for (size_t i = 0; i < content->size(); ++i) {
    const Json& part = (*content)[i];
    const std::string part_path = path + ".content[" + std::to_string(i) + "]";
    if (!part.is_object()) return InvalidRequest(part_path, "expected an object");
    const std::string type = part.value("type", std::string());
    if (type != "text") {
      return InvalidRequest(part_path + ".type", "only \"text\" parts are supported, got \"" + type + "\"");
    }
    const Json* text = Find(part, "text");
    if (text == nullptr || !text->is_string()) return InvalidRequest(part_path + ".text", "expected a string");
    *out += text->get<std::string>();
  }
  return std::nullopt;
}

std::optional<ApiError> ReadToolCalls(const Json& message, const std::string& path, ChatMessage* m) {
  const Json* calls = Find(message, "tool_calls");
  if (calls == nullptr) return std::nullopt;
  if (!calls->is_array()) return InvalidRequest(path + ".tool_calls", "expected an array");
  for (size_t i = 0; i < calls->size(); ++i) {
    const Json& call = (*calls)[i];
    const std::string call_path = path + ".tool_calls[" + std::to_string(i) + "]";
    if (!call.is_object()) return InvalidRequest(call_path, "expected an object");
    const Json* function = Find(call, "function");
    if (function == nullptr || !function->is_object()) {
      return InvalidRequest(call_path + ".function", "expected an object with name and arguments");
    }
    ChatToolCall c;
    const Json* name = Find(*function, "name");
    if (name == nullptr || !name->is_string() || name->get<std::string>().empty()) {
      return InvalidRequest(call_path + ".function.name", "expected a non-empty string");
    }
    c.name = name->get<std::string>();
    const Json* arguments = Find(*function, "arguments");
    if (arguments == nullptr) {
      c.arguments = "{}";
    } else if (arguments->is_string()) {
      c.arguments = arguments->get<std::string>();
      if (ParseJson(c.arguments).status().code() != Code::kOk) {
        return InvalidRequest(call_path + ".function.arguments", "not valid JSON");
      }
    } else {
      c.arguments = arguments->dump();  // an object given directly
    }
    m->tool_calls.push_back(std::move(c));
  }
  return std::nullopt;
}

std::optional<ApiError> ReadMessages(const Json& body, std::vector<ChatMessage>* out) {
  const Json* messages = Find(body, "messages");
  if (messages == nullptr) return InvalidRequest("messages", "missing");
  if (!messages->is_array()) return InvalidRequest("messages", std::string("expected an array, got ") + messages->type_name());
  if (messages->empty()) return InvalidRequest("messages", "must hold at least one message");
  for (size_t i = 0; i < messages->size(); ++i) {
    const Json& message = (*messages)[i];
    const std::string path = "messages[" + std::to_string(i) + "]";
    if (!message.is_object()) return InvalidRequest(path, "expected an object");
    ChatMessage m;
    const Json* role = Find(message, "role");
    if (role == nullptr || !role->is_string()) return InvalidRequest(path + ".role", "expected a string");
    m.role = role->get<std::string>();
    if (m.role == "developer") m.role = "system";
    if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool") {
      return InvalidRequest(path + ".role",
                            "unknown role \"" + m.role + "\" (system, developer, user, assistant, tool)");
    }
    if (auto e = ReadContent(message, path, &m.content)) return e;
    if (m.role == "assistant") {
      if (auto e = ReadToolCalls(message, path, &m)) return e;
    } else if (Find(message, "content") == nullptr) {
      return InvalidRequest(path + ".content", "missing");
    }
    out->push_back(std::move(m));
  }
  return std::nullopt;
}

std::optional<ApiError> ReadTools(const Json& body, ChatRequest* out) {
  if (Find(body, "functions") != nullptr || Find(body, "function_call") != nullptr) {
    return InvalidRequest(Find(body, "functions") ? "functions" : "function_call",
                          "the legacy functions API is not supported; use tools");
  }
  if (const Json* tools = Find(body, "tools")) {
    if (!tools->is_array()) return InvalidRequest("tools", "expected an array");
    for (size_t i = 0; i < tools->size(); ++i) {
      const Json& tool = (*tools)[i];
      const std::string path = "tools[" + std::to_string(i) + "]";
      if (!tool.is_object() || tool.value("type", std::string()) != "function") {
        return InvalidRequest(path + ".type", "only \"function\" tools are supported");
      }
      const Json* function = Find(tool, "function");
      if (function == nullptr || !function->is_object()) return InvalidRequest(path + ".function", "expected an object");
      const Json* name = Find(*function, "name");
      if (name == nullptr || !name->is_string() || name->get<std::string>().empty()) {
        return InvalidRequest(path + ".function.name", "expected a non-empty string");
      }
      out->tools_json.push_back(tool.dump());
    }
  }
  if (const Json* choice = Find(body, "tool_choice")) {
    if (!choice->is_string() || (choice->get<std::string>() != "auto" && choice->get<std::string>() != "none")) {
      return InvalidRequest("tool_choice", "only \"auto\" and \"none\" are supported");
    }
    out->tool_choice_none = choice->get<std::string>() == "none";
  }
  return std::nullopt;
}

// The leading field name of a message like "max_tokens: must ..." or
// "prompt of 9 tokens ...": letters, digits, '_', '.', '[', ']' up to ':'.
std::string LeadingField(const std::string& message) {
  size_t i = 0;
  while (i < message.size() && (std::isalnum(static_cast<unsigned char>(message[i])) || message[i] == '_' ||
                                message[i] == '.' || message[i] == '[' || message[i] == ']')) {
    ++i;
  }
  if (i == 0 || i >= message.size() || message[i] != ':') return "";
  return message.substr(0, i);
}

}  // namespace

Json ApiError::ToJson() const {
  return Json{{"error",
               {{"message", message},
                {"type", type},
                {"param", param.empty() ? Json(nullptr) : Json(param)},
                {"code", code.empty() ? Json(nullptr) : Json(code)}}}};
}

ApiError InvalidRequest(std::string param, std::string why, std::string code) {
  ApiError e;
  e.message = param.empty() ? why : param + ": " + why;
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

ApiError ApiErrorFromStatus(const Status& status) {
  ApiError e;
  e.http_status = HttpStatusFromCode(status.code());
  e.message = status.message();
  e.type = e.http_status >= 500 ? "server_error" : "invalid_request_error";
  e.param = LeadingField(status.message());
  if (status.message().find("exceeds the context") != std::string::npos) e.code = "context_length_exceeded";
  return e;
}

std::optional<ApiError> ParseJsonBody(std::string_view body, Json* out) {
  if (body.empty()) return InvalidRequest("", "the request body is empty; send a JSON object");
  Result<Json> parsed = ParseJson(body, "malformed JSON");
  if (!parsed.ok()) return InvalidRequest("", parsed.status().message());
  if (!parsed->is_object()) {
    return InvalidRequest("", std::string("the request body must be a JSON object, got ") + parsed->type_name());
  }
  *out = std::move(parsed).value();
  return std::nullopt;
}

std::optional<ApiError> ReadCompletionRequest(const Json& body, CompletionRequest* out) {
  if (auto e = ReadGenerationParams(body, /*chat=*/false, &out->params)) return e;
  const Json* prompt = Find(body, "prompt");
  if (prompt == nullptr) return InvalidRequest("prompt", "missing");
  // A one-element batch is the same as its element.
  const Json* one = prompt;
  if (prompt->is_array() && prompt->size() == 1 && ((*prompt)[0].is_string() || (*prompt)[0].is_array())) {
    one = &(*prompt)[0];
  }
  if (one->is_string()) {
    out->prompt_text = one->get<std::string>();
    if (out->prompt_text.empty()) return InvalidRequest("prompt", "is empty");
  } else if (one->is_array()) {
    if (one->empty()) return InvalidRequest("prompt", "is empty");
    out->prompt_is_tokens = true;
    for (size_t i = 0; i < one->size(); ++i) {
      const Json& id = (*one)[i];
      if (id.is_string() || id.is_array()) {
        return InvalidRequest("prompt", "only one prompt per request is supported");
      }
      const std::string path = "prompt[" + std::to_string(i) + "]";
      Result<int64_t> v = JsonView(id, path).AsInt();
      if (!v.ok()) return FieldError("prompt", v.status());
      if (*v < 0 || *v > INT32_MAX) return InvalidRequest("prompt", path + " = " + std::to_string(*v) + " is not a token id");
      out->prompt_tokens.push_back(static_cast<int32_t>(*v));
    }
  } else {
    return InvalidRequest("prompt", std::string("expected a string or an array of token ids, got ") + one->type_name());
  }
  if (auto e = ReadBool(body, "echo", &out->echo)) return e;
  if (out->echo && out->params.logprobs) return InvalidRequest("echo", "echo with logprobs is not supported");
  if (const Json* suffix = Find(body, "suffix")) {
    if (!suffix->is_string() || !suffix->get<std::string>().empty()) return InvalidRequest("suffix", "not supported");
  }
  return std::nullopt;
}

// A non-empty array of token ids (0 to INT32_MAX) named `key`.
std::optional<ApiError> ReadTokenIds(const Json& body, const char* key, std::vector<int32_t>* out) {
  const Json* ids = Find(body, key);
  if (ids == nullptr) return InvalidRequest(key, "missing");
  if (!ids->is_array()) return InvalidRequest(key, std::string("expected an array of token ids, got ") + ids->type_name());
  if (ids->empty()) return InvalidRequest(key, "is empty");
  out->reserve(ids->size());
  for (size_t i = 0; i < ids->size(); ++i) {
    const std::string path = std::string(key) + "[" + std::to_string(i) + "]";
    Result<int64_t> v = JsonView((*ids)[i], path).AsInt();
    if (!v.ok()) return FieldError(key, v.status());
    if (*v < 0 || *v > INT32_MAX) return InvalidRequest(key, path + " = " + std::to_string(*v) + " is not a token id");
    out->push_back(static_cast<int32_t>(*v));
  }
  return std::nullopt;
}

namespace {

std::optional<ApiError> ReadReasoningEffort(const Json& body, std::optional<int>* out) {
  const Json* effort = Find(body, "reasoning_effort");
  if (effort == nullptr) return std::nullopt;
  // A number is read as its decimal text, so 50 and "50" are one value and
  // 50.5 or true are refused like "medium".
  const std::string text = effort->is_string() ? effort->get<std::string>() : effort->dump();
  Result<int> parsed = ParseReasoningEffort(text);
  if (!parsed.ok()) {
    return InvalidRequest("reasoning_effort", "expected " + ReasoningEffortValues() + ", got " + effort->dump());
  }
  *out = *parsed;
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ReadChatRequest(const Json& body, ChatRequest* out) {
  if (auto e = ReadGenerationParams(body, /*chat=*/true, &out->params)) return e;
  if (auto e = ReadMessages(body, &out->messages)) return e;
  if (auto e = ReadTools(body, out)) return e;
  if (auto e = ReadReasoningEffort(body, &out->reasoning_effort)) return e;
  return std::nullopt;
}

std::vector<ChatMessage> MessagesWithReasoningEffort(const ChatRequest& request) {
  std::vector<ChatMessage> messages = request.messages;
  if (!request.reasoning_effort) return messages;
  auto system = std::find_if(messages.begin(), messages.end(), [](const ChatMessage& m) { return m.role == "system"; });
  if (system == messages.end()) {
    ChatMessage created;
    created.role = "system";
    system = messages.insert(messages.begin(), std::move(created));
  }
  system->content = WithReasoningEffort(system->content, *request.reasoning_effort);
  return messages;
}

std::optional<ApiError> ReadScoreRequest(const Json& body, ScoreRequest* out) {
  if (!body.contains("model") || body["model"].is_null()) return InvalidRequest("model", "missing");
  if (auto e = ReadString(body, "model", &out->model)) return e;
  if (auto e = ReadTokenIds(body, "prompt_token_ids", &out->prompt_token_ids)) return e;
  if (auto e = ReadTokenIds(body, "token_ids", &out->token_ids)) return e;
  if (auto e = ReadDouble(body, "temperature", 0, 2, false, &out->temperature)) return e;
  int64_t top = 0;
  if (auto e = ReadInt(body, "top_logprobs", 0, kMaxTopLogprobs, &top)) return e;
  out->top_logprobs = static_cast<int32_t>(top);
  if (auto e = ReadBool(body, "full_vocab", &out->full_vocab)) return e;
  const Json* routing = Find(body, "routing");
  out->routing_given = routing != nullptr;
  if (routing != nullptr && routing->is_string()) {
    Result<std::vector<uint8_t>> packed = Base64Decode(routing->get_ref<const std::string&>());
    if (!packed.ok()) return InvalidRequest("routing", "not base64: " + packed.status().message());
    out->routing_binary = true;
    out->routing_packed = std::move(packed).value();
  } else if (routing != nullptr) {
    if (!routing->is_array()) {
      return InvalidRequest("routing", std::string("expected an array or a base64 string, got ") + routing->type_name());
    }
    auto not_array = [](const std::string& path, const Json& j) {
      return InvalidRequest("routing", path + ": expected an array, got " + j.type_name());
    };
    out->routing.resize(routing->size());
    for (size_t t = 0; t < routing->size(); ++t) {
      const Json& layers = (*routing)[t];
      const std::string tp = "routing[" + std::to_string(t) + "]";
      if (!layers.is_array()) return not_array(tp, layers);
      out->routing[t].resize(layers.size());
      for (size_t l = 0; l < layers.size(); ++l) {
        const Json& ids = layers[l];
        const std::string lp = tp + "[" + std::to_string(l) + "]";
        if (!ids.is_array()) return not_array(lp, ids);
        for (size_t j = 0; j < ids.size(); ++j) {
          Result<int64_t> v = JsonView(ids[j], lp + "[" + std::to_string(j) + "]").AsInt();
          if (!v.ok()) return FieldError("routing", v.status());
          if (*v < 0 || *v > INT32_MAX) {
            return InvalidRequest("routing", lp + "[" + std::to_string(j) + "] = " + std::to_string(*v) +
                                                 " is not an expert id");
          }
          out->routing[t][l].push_back(static_cast<int32_t>(*v));
        }
      }
    }
  }
  int64_t id_bytes = 0;
  bool id_bytes_present = false;
  if (auto e = ReadInt(body, "routing_id_bytes", 1, 2, &id_bytes, &id_bytes_present)) return e;
  if (id_bytes_present) {
    if (!out->routing_binary) return InvalidRequest("routing_id_bytes", "only with \"routing\" as a base64 string");
    out->routing_id_bytes = id_bytes;
  }
  std::string format = "json";
  if (auto e = ReadString(body, "format", &format)) return e;
  if (format == "json") {
    out->format = ScoreFormat::kJson;
  } else if (format == "f32") {
    out->format = ScoreFormat::kF32;
  } else {
    return InvalidRequest("format", "expected \"json\" or \"f32\", got \"" + format + "\"");
  }
  if (out->full_vocab && out->format != ScoreFormat::kF32) {
    return InvalidRequest("format", "full_vocab is returned as binary: send \"format\": \"f32\"");
  }
  if (out->format == ScoreFormat::kF32 && !out->full_vocab) {
    return InvalidRequest("full_vocab", "format \"f32\" returns the whole vocabulary: send \"full_vocab\": true");
  }
  if (out->format == ScoreFormat::kF32 && out->top_logprobs > 0) {
    return InvalidRequest("top_logprobs", "not returned with format \"f32\" (the body holds every token's logprob)");
  }
  return std::nullopt;
}

std::optional<ApiError> ReadSessionAppendRequest(const Json& body, SessionAppendRequest* out) {
  const bool tokens = Find(body, "token_ids") != nullptr, text = Find(body, "text") != nullptr;
  if (tokens == text) return InvalidRequest(tokens ? "text" : "token_ids", "give exactly one of token_ids and text");
  out->is_tokens = tokens;
  if (tokens) return ReadTokenIds(body, "token_ids", &out->token_ids);
  if (auto e = ReadString(body, "text", &out->text)) return e;
  if (out->text.empty()) return InvalidRequest("text", "is empty");
  return std::nullopt;
}

std::optional<ApiError> ReadSessionGenerateRequest(const Json& body, GenerationParams* out) {
  if (auto e = ReadGenerationParams(body, /*chat=*/false, out)) return e;
  if (out->n != 1) return InvalidRequest("n", "a session's turn is one choice");
  if (out->stream) return InvalidRequest("stream", "a session's turn is answered whole");
  if (out->return_routing) return InvalidRequest("return_routing", "not with sessions");
  if (out->pin_version) return InvalidRequest("pin_version", "a session moves to new weights at each swap");
  if (out->min_version) return InvalidRequest("min_version", "not with sessions");
  return std::nullopt;
}

std::optional<ApiError> ReadSessionPauseRequest(const Json& body, SessionPauseRequest* out) {
  std::string to = "memory";
  if (auto e = ReadString(body, "to", &to)) return e;
  if (to != "memory" && to != "disk") return InvalidRequest("to", "must be \"memory\" or \"disk\", got \"" + to + "\"");
  out->to_disk = to == "disk";
  return std::nullopt;
}

std::optional<ApiError> ReadWeightsRequest(const Json& body, WeightsRequest* out) {
  if (!body.is_object()) return InvalidRequest("", "expected a JSON object");
  if (!body.contains("path") || body["path"].is_null()) return InvalidRequest("path", "missing");
  if (auto e = ReadString(body, "path", &out->path)) return e;
  if (out->path.empty()) return InvalidRequest("path", "must not be empty");
  bool present = false;
  if (auto e = ReadInt(body, "version", 1, INT64_MAX, &out->version, &present)) return e;
  if (!present) return InvalidRequest("version", "missing");
  return std::nullopt;
}

}  // namespace flashroll::engine
