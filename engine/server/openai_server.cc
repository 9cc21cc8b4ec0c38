#include "engine/server/openai_server.h"

#include "engine/server/clients.h"
#include "engine/server/session_routes.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <chrono>
#include <cstring>
#include <optional>

#include "common/base64.h"
#include "common/log.h"
#include "common/strings.h"
#include "engine/models/routing.h"
#include "engine/server/choice_text.h"
#include "engine/server/openai_request.h"
#include "engine/server/openai_response.h"
#include "engine/server/tool_calls.h"
#include "engine/serving/weight_loader.h"

namespace flashroll::engine {
namespace {

using Clock = std::chrono::steady_clock;

// How long a request waits for its next token before writing something, to
// find out whether its client is still there.
constexpr std::chrono::milliseconds kIdleWrite{500};
// Not "application/json", which cpp-httplib would gzip, holding chunks back.
constexpr char kJsonType[] = "application/json; charset=utf-8";
constexpr char kCompletionsPath[] = "/v1/completions";
constexpr char kChatPath[] = "/v1/chat/completions";
constexpr char kScorePath[] = "/v1/score";
constexpr char kSequencesPath[] = "/v1/sequences";  // the metrics' label for /v1/sequences/{id}[/...]
constexpr char kWeightsPath[] = "/v1/weights";
// f32 score bodies are written in pieces of about this many bytes.
constexpr size_t kBinaryChunkBytes = 1u << 20;

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

const char* FinishName(FinishReason reason, bool cut_at_stop_string) {
  if (cut_at_stop_string) return "stop";
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kNone: break;
  }
  return "stop";
}

Json TokenIdsJson(const std::vector<int32_t>& ids) {
  Json out = Json::array();
  for (int32_t id : ids) out.push_back(id);
  return out;
}

Json ToolCallJson(const ChatToolCall& call, std::optional<size_t> index) {
  Json j = {{"id", NewResponseId("call_")},
            {"type", "function"},
            {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
  if (index) j["index"] = *index;
  return j;
}

// One generation request, whichever route it came from.
struct Job {
  bool chat = false;
  std::string endpoint;
  GenerationParams params;
  std::vector<int32_t> prompt;
  std::string echo;               // completions with echo: the prompt's text
  bool parse_tools = false;       // chat with tools: tool_calls from the text
  ChatFormatKind kind = ChatFormatKind::kChatMl;
  std::string id;
  int64_t created = 0;
  Clock::time_point arrived;
  int client = 0;  // ApiKeys::Identify
};

// A choice while it is generated.
struct ChoiceState {
  ChoiceState(const Tokenizer& tokenizer, const std::vector<std::string>& stops) : text(tokenizer, stops) {}
  ChoiceText text;
  std::vector<int32_t> tokens;
  std::vector<SampledToken> samples;
  FinishReason finish = FinishReason::kNone;
  bool done = false;
  size_t sent = 0;           // bytes of text already streamed
  size_t samples_sent = 0;   // samples already streamed
  size_t ids_sent = 0;       // token ids already streamed
  size_t text_offset = 0;    // completions logprobs: where the next unsent token starts
  bool echoed = false;       // completions with echo: the prompt's text was streamed
  uint64_t sequence_id = 0;  // the engine's sequence of this choice, once it exists
  std::vector<std::vector<int32_t>> routing;  // return_routing: [token][moe_layer * k]
  std::vector<int64_t> versions;              // the weight version of each token
  Clock::time_point last_token;
};

StreamResponse BodyReply(int status, std::string content_type, std::string body) {
  StreamResponse reply;
  reply.status = status;
  reply.content_type = std::move(content_type);
  reply.produce = [body = std::move(body)](ChunkWriter& writer) {
    writer.Write(body);
    return Status::Ok();
  };
  return reply;
}

// [token][moe_layer * k] ids as [[[ids of a layer] per layer] per token].
Json RoutingJson(const std::vector<std::vector<int32_t>>& routing, int64_t k) {
  Json tokens = Json::array();
  for (const std::vector<int32_t>& ids : routing) {
    Json layers = Json::array();
    for (size_t at = 0; k > 0 && at < ids.size(); at += static_cast<size_t>(k)) {
      layers.push_back(Json(std::vector<int32_t>(ids.begin() + static_cast<long>(at),
                                                 ids.begin() + static_cast<long>(at) + k)));
    }
    tokens.push_back(std::move(layers));
  }
  return tokens;
}

// return_routing's binary form: the [token][moe_layer * k] ids packed as
// the engine keeps them (routing.h), in base64.
std::string RoutingBase64(const std::vector<std::vector<int32_t>>& routing, const RoutingShape& shape) {
  std::vector<uint8_t> packed;
  packed.reserve(routing.size() * static_cast<size_t>(shape.TokenBytes()));
  for (const std::vector<int32_t>& ids : routing) PackRouting(shape, ids.data(), &packed);
  return Base64Encode(packed);
}

// "1 byte", "12 bytes".
std::string ByteCount(int64_t n) { return std::to_string(n) + (n == 1 ? " byte" : " bytes"); }

// A sequence id as clients see it: a string of decimal digits.
std::string SequenceIdString(uint64_t id) { return std::to_string(id); }

// The engine's id for a path's {id}: decimal digits of a uint64 (nullopt
// otherwise, which is answered as an unknown sequence).
std::optional<uint64_t> ParseSequenceId(const std::string& text) {
  uint64_t id = 0;
  const bool digits = std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (text.empty() || text.size() > 20 || !digits) return std::nullopt;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return id;
}

Json SequenceJson(const SequenceInfo& info) {
  return Json{{"id", SequenceIdString(info.id)},
              {"object", "sequence"},
              {"state", info.state},
              {"prompt_tokens", info.prompt_tokens},
              {"generated_tokens", info.generated_tokens},
              {"kv_blocks", info.kv_blocks}};
}

// The ApiError for a failed Pause, Resume or GetSequence: 404 for an unknown
// or finished sequence, 409 for a state conflict.
ApiError SequenceError(const Status& status) {
  ApiError e;
  e.message = status.message();
  if (status.code() == Code::kNotFound) {
    e.http_status = 404;
    e.code = "sequence_not_found";
  } else if (status.code() == Code::kFailedPrecondition) {
    e.http_status = 409;
    e.code = "sequence_state_conflict";
  } else {
    e = ApiErrorFromStatus(status);
  }
  return e;
}

StreamResponse ErrorReply(const ApiError& e) { return BodyReply(e.http_status, kJsonType, DumpJson(e.ToJson())); }

HttpResponse RawJson(int status, const Json& body) {
  HttpResponse r;
  r.status = status;
  r.content_type = "application/json";
  r.body = DumpJson(body);
  return r;
}

}  // namespace

struct OpenAiServer::Impl {
  Engine* engine = nullptr;
  const Tokenizer* tokenizer = nullptr;
  OpenAiServerOptions options;
  std::unique_ptr<ChatFormat> chat_format;
  Status chat_format_error;
  ServerMetrics metrics;
  std::unique_ptr<ApiKeys> keys;
  Owners owners;  // each choice's engine sequence, by the client that asked
  int64_t started_at = UnixNow();
  // Declared before http, so destroyed after it: handlers use it.
  std::unique_ptr<WeightLoader> weights;
  std::unique_ptr<SessionRoutes> sessions;
  std::unique_ptr<HttpServer> http;

  void AddRoutes();
  std::optional<ApiError> CheckAuth(const HttpRequest& request, int* client = nullptr) const {
    int ignored = 0;
    return keys->Identify(request, client ? client : &ignored);
  }
  std::optional<ApiError> CheckModel(const std::string& model) const;
  // Fills job->prompt from the chat messages; sets parse_tools.
  std::optional<ApiError> ChatPrompt(const ChatRequest& request, Job* job) const;
  // The default max_tokens and the context check; fills `out`.
  std::optional<ApiError> Budget(const Job& job, int64_t default_max_tokens, const char* prompt_field,
                                 int64_t* max_tokens) const;
  Result<StreamResponse> Completions(const HttpRequest& request);
  Result<StreamResponse> Chat(const HttpRequest& request);
  Result<StreamResponse> Score(const HttpRequest& request);
  // GET /v1/sequences/{id} (action empty), POST .../pause and .../resume.
  HttpResponse SequenceRoute(const HttpRequest& request, const std::string& action);
  // POST /v1/weights and GET /v1/weights.
  HttpResponse LoadWeights(const HttpRequest& request);
  HttpResponse WeightsStatus(const HttpRequest& request);
  // Submits the job and returns the reply that streams or collects it.
  StreamResponse Run(Job job, std::vector<int32_t> stop_tokens, int64_t max_tokens);
  // Reply helpers that count the request in the metrics.
  StreamResponse Fail(const std::string& endpoint, Clock::time_point arrived, const ApiError& e) {
    metrics.ObserveRequest(endpoint, e.http_status, SecondsSince(arrived));
    return ErrorReply(e);
  }
};

std::optional<ApiError> OpenAiServer::Impl::CheckModel(const std::string& model) const {
  if (model == options.model_name) return std::nullopt;
  ApiError e;
  e.http_status = 404;
  e.param = "model";
  e.code = "model_not_found";
  e.message = "The model `" + model + "` does not exist; this server serves `" + options.model_name + "`.";
  return e;
}

std::optional<ApiError> OpenAiServer::Impl::Budget(const Job& job, int64_t default_max_tokens, const char* prompt_field,
                                                   int64_t* max_tokens) const {
  const int64_t limit = engine->max_model_len();
  const int64_t prompt = static_cast<int64_t>(job.prompt.size());
  const std::string context = "This model's maximum context length is " + std::to_string(limit) + " tokens";
  if (prompt >= limit) {
    return InvalidRequest(prompt_field,
                          context + "; the prompt has " + std::to_string(prompt) + " tokens, leaving none to generate.",
                          "context_length_exceeded");
  }
  if (job.params.max_tokens) {
    *max_tokens = *job.params.max_tokens;
    if (prompt + *max_tokens > limit) {
      return InvalidRequest("max_tokens",
                            context + "; you requested " + std::to_string(prompt + *max_tokens) + " tokens (" +
                                std::to_string(prompt) + " in the prompt, " + std::to_string(*max_tokens) +
                                " for the completion).",
                            "context_length_exceeded");
    }
  } else {
    *max_tokens = std::min(default_max_tokens, limit - prompt);
  }
  return std::nullopt;
}

std::optional<ApiError> OpenAiServer::Impl::ChatPrompt(const ChatRequest& request, Job* job) const {
  if (chat_format == nullptr) {
    return InvalidRequest("messages", "this model has no usable chat template (" + chat_format_error.message() +
                                          "); use /v1/completions");
  }
  const bool render_tools = chat_format->supports_tools();
  Result<std::unique_ptr<ChatConversation>> conversation =
      ChatConversation::Create(*chat_format, render_tools ? request.tools_json : std::vector<std::string>{});
  if (!conversation.ok()) return InvalidRequest("tools", conversation.status().message());
  job->kind = chat_format->kind();
  const std::vector<ChatMessage> messages = MessagesWithReasoningEffort(request);
  for (size_t i = 0; i < messages.size(); ++i) {
    ChatMessage m = messages[i];
    if (!render_tools && !m.tool_calls.empty()) {
      // The template cannot render calls: write them as the model writes them.
      const std::string calls = ToolCallsAsText(job->kind, m.tool_calls);
      m.content = m.content.empty() ? calls : m.content + "\n" + calls;
      m.tool_calls.clear();
    }
    Status appended = (*conversation)->Append(m);
    if (!appended.ok()) return InvalidRequest("messages[" + std::to_string(i) + "]", appended.message());
  }
  Status prompt = (*conversation)->AppendGenerationPrompt();
  if (!prompt.ok()) return InvalidRequest("messages", prompt.message());
  job->prompt = (*conversation)->tokens();
  job->parse_tools = !request.tools_json.empty() && !request.tool_choice_none;
  return std::nullopt;
}

Result<StreamResponse> OpenAiServer::Impl::Completions(const HttpRequest& http_request) {
  Job job;
  job.endpoint = kCompletionsPath;
  job.arrived = Clock::now();
  if (auto e = CheckAuth(http_request, &job.client)) return Fail(job.endpoint, job.arrived, *e);
  Json body;
  if (auto e = ParseJsonBody(http_request.body, &body)) return Fail(job.endpoint, job.arrived, *e);
  CompletionRequest request;
  if (auto e = ReadCompletionRequest(body, &request)) return Fail(job.endpoint, job.arrived, *e);
  if (auto e = CheckModel(request.params.model)) return Fail(job.endpoint, job.arrived, *e);
  job.params = std::move(request.params);
  if (request.prompt_is_tokens) {
    job.prompt = std::move(request.prompt_tokens);
    for (size_t i = 0; i < job.prompt.size(); ++i) {
      if (job.prompt[i] >= tokenizer->vocab_size()) {
        return Fail(job.endpoint, job.arrived,
                    InvalidRequest("prompt", "token " + std::to_string(job.prompt[i]) + " at position " +
                                                 std::to_string(i) + " is outside the vocabulary of " +
                                                 std::to_string(tokenizer->vocab_size()) + " tokens"));
      }
    }
    if (request.echo) job.echo = tokenizer->Decode(job.prompt, /*skip_special=*/true);
  } else {
    if (tokenizer->add_bos() && tokenizer->bos_id() >= 0) job.prompt.push_back(tokenizer->bos_id());
    // Special tokens written in the prompt are those tokens, as transformers reads a prompt.
    tokenizer->EncodeAppend(request.prompt_text, /*parse_special=*/true, &job.prompt);
    if (request.echo) job.echo = request.prompt_text;
  }
  for (size_t i = 0; i < job.params.stop_token_ids.size(); ++i) {
    if (job.params.stop_token_ids[i] >= tokenizer->vocab_size()) {
      return Fail(job.endpoint, job.arrived,
                  InvalidRequest("stop_token_ids", "stop_token_ids[" + std::to_string(i) + "] = " +
                                                       std::to_string(job.params.stop_token_ids[i]) +
                                                       " is outside the vocabulary of " +
                                                       std::to_string(tokenizer->vocab_size()) + " tokens"));
    }
  }
  int64_t max_tokens = 0;
  if (auto e = Budget(job, options.default_max_tokens, "prompt", &max_tokens)) {
    return Fail(job.endpoint, job.arrived, *e);
  }
  job.id = NewResponseId("cmpl-");
  job.created = UnixNow();
  return Run(std::move(job), {}, max_tokens);
}

Result<StreamResponse> OpenAiServer::Impl::Chat(const HttpRequest& http_request) {
  Job job;
  job.chat = true;
  job.endpoint = kChatPath;
  job.arrived = Clock::now();
  if (auto e = CheckAuth(http_request, &job.client)) return Fail(job.endpoint, job.arrived, *e);
  Json body;
  if (auto e = ParseJsonBody(http_request.body, &body)) return Fail(job.endpoint, job.arrived, *e);
  ChatRequest request;
  if (auto e = ReadChatRequest(body, &request)) return Fail(job.endpoint, job.arrived, *e);
  if (auto e = CheckModel(request.params.model)) return Fail(job.endpoint, job.arrived, *e);
  if (auto e = ChatPrompt(request, &job)) return Fail(job.endpoint, job.arrived, *e);
  job.params = std::move(request.params);
  int64_t max_tokens = 0;
  // Without max_tokens a reply may run to the end of the context, as OpenAI's does.
  if (auto e = Budget(job, engine->max_model_len(), "messages", &max_tokens)) {
    return Fail(job.endpoint, job.arrived, *e);
  }
  job.id = NewResponseId("chatcmpl-");
  job.created = UnixNow();
  return Run(std::move(job), chat_format->stop_tokens(), max_tokens);
}

StreamResponse OpenAiServer::Impl::Run(Job job, std::vector<int32_t> stop_tokens, int64_t max_tokens) {
  if (job.params.min_version) {
    std::optional<Clock::time_point> deadline;
    if (job.params.min_version_timeout) deadline = job.arrived + *job.params.min_version_timeout;
    Status arrived = weights->WaitForVersion(*job.params.min_version, deadline);
    if (!arrived.ok()) {
      ApiError e = ApiErrorFromStatus(arrived);
      e.param = "min_version";
      return Fail(job.endpoint, job.arrived, e);
    }
  }
  GenerationRequest request;
  request.prompt = job.prompt;
  request.sampling = job.params.sampling;
  request.max_tokens = max_tokens;
  request.n = job.params.n;
  request.stop_tokens = std::move(stop_tokens);
  request.stop_tokens.insert(request.stop_tokens.end(), job.params.stop_token_ids.begin(), job.params.stop_token_ids.end());
  request.stop_strings = job.params.stop;
  request.ignore_eos = job.params.ignore_eos;
  request.return_routing = job.params.return_routing;
  request.pin_version = job.params.pin_version;
  request.return_prompt_routing = job.params.return_routing;
  Result<std::shared_ptr<RequestStream>> submitted = engine->Submit(std::move(request));
  if (!submitted.ok()) return Fail(job.endpoint, job.arrived, ApiErrorFromStatus(submitted.status()));
  std::shared_ptr<RequestStream> stream = std::move(submitted).value();

  StreamResponse reply;
  reply.status = 200;
  if (job.params.stream) {
    reply.content_type = "text/event-stream";
    reply.headers.emplace("Cache-Control", "no-cache");
  } else {
    reply.content_type = kJsonType;
  }
  reply.produce = [this, job = std::move(job), stream](ChunkWriter& writer) -> Status {
    const Tokenizer& tok = *tokenizer;
    const GenerationParams& p = job.params;
    const bool with_top = p.top_logprobs > 0;
    const char* object = job.chat ? (p.stream ? "chat.completion.chunk" : "chat.completion")
                                  : "text_completion";
    std::vector<ChoiceState> choices;
    choices.reserve(static_cast<size_t>(p.n));
    for (int32_t c = 0; c < p.n; ++c) {
      choices.emplace_back(tok, p.stop);
      choices.back().last_token = job.arrived;
    }
    Claims claims(owners, job.client);  // each choice's sequence, while the reply runs
    bool first_token = true;
    bool stream_started = false;
    auto gone = [&]() {
      stream->Cancel();
      metrics.ObserveRequest(job.endpoint, 499, SecondsSince(job.arrived));
      return Status::Unavailable("client went away; request " + job.id + " cancelled");
    };
    auto chunk = [&](Json choice_list) {
      Json j = {{"id", job.id}, {"object", object}, {"created", job.created}, {"model", options.model_name},
                {"choices", std::move(choice_list)}};
      if (p.return_token_ids && !stream_started) j["prompt_token_ids"] = TokenIdsJson(job.prompt);
      stream_started = true;
      return "data: " + DumpJson(j) + "\n\n";
    };
    // Something is written at least every kIdleWrite, so that a client
    // that left is noticed (a write fails) while its request still runs: an
    // SSE comment, or JSON's insignificant whitespace before the body.
    Clock::time_point last_write = Clock::now();
    auto write = [&](const std::string& data) {
      last_write = Clock::now();
      return writer.Write(data);
    };
    if (p.stream && job.chat) {
      // The first chunk of each choice names the role, as OpenAI's do.
      Json list = Json::array();
      for (int32_t c = 0; c < p.n; ++c) {
        list.push_back({{"index", c}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr},
                        {"finish_reason", nullptr}});
      }
      if (!write(chunk(std::move(list)))) return gone();
    }

    while (true) {
      if (Clock::now() - last_write >= kIdleWrite && !write(p.stream ? ": keep-alive\n\n" : " ")) return gone();
      bool timed_out = false;
      std::optional<StreamEvent> event = stream->Next(kIdleWrite, &timed_out);
      if (timed_out) continue;
      if (!event) break;
      ChoiceState& s = choices[static_cast<size_t>(event->choice)];
      if (event->sequence_id != 0 && s.sequence_id == 0) {
        s.sequence_id = event->sequence_id;
        claims.Add(s.sequence_id);
      }
      if (event->has_token) {
        const Clock::time_point now = Clock::now();
        if (first_token) {
          metrics.ObserveTimeToFirstToken(std::chrono::duration<double>(now - job.arrived).count());
          first_token = false;
        } else if (!s.tokens.empty()) {
          metrics.ObserveInterTokenLatency(std::chrono::duration<double>(now - s.last_token).count());
        }
        s.last_token = now;
        s.tokens.push_back(event->token.token);
        s.samples.push_back(std::move(event->token));
        s.versions.push_back(event->version);
        for (auto& r : event->prompt_routing) s.routing.push_back(std::move(r));
        if (!event->routing.empty()) s.routing.push_back(std::move(event->routing));
        s.text.Push(s.tokens.back());
      }
      if (event->finish != FinishReason::kNone) {
        s.finish = event->finish;
        s.done = true;
        s.text.Finish();
      }
      if (!p.stream) continue;

      // What this event lets the stream send for choice s.
      const std::string& text = s.text.text();
      size_t until = s.text.stable_length();
      std::vector<ChatToolCall> calls;
      std::string content_tail;
      if (job.parse_tools) {
        const size_t free = ToolCallFreeLength(job.kind, std::string_view(text).substr(0, until));
        if (s.done) {
          ParsedToolCalls parsed = ParseToolCalls(job.kind, text);
          calls = std::move(parsed.calls);
          if (!calls.empty()) until = std::max(free, s.sent);
        } else {
          until = free;
        }
      }
      std::string delta = until > s.sent ? text.substr(s.sent, until - s.sent) : std::string();
      s.sent = std::max(s.sent, until);
      const bool new_samples = s.samples.size() > s.samples_sent;
      if (delta.empty() && !s.done && !(p.logprobs && new_samples) && !(p.return_token_ids && new_samples)) {
        continue;
      }
      std::span<const SampledToken> fresh(s.samples.data() + s.samples_sent, s.samples.size() - s.samples_sent);
      Json choice = {{"index", event->choice}};
      if (s.sequence_id != 0) choice["sequence_id"] = SequenceIdString(s.sequence_id);
      Json logprobs = nullptr;
      if (p.logprobs) {
        if (job.chat) {
          logprobs = {{"content", ChatLogprobContent(tok, fresh, with_top)}};
        } else {
          logprobs = EmptyCompletionLogprobs(with_top);
          size_t offset = job.echo.size() + s.text_offset;
          AppendCompletionLogprobs(tok, fresh, with_top, &offset, &logprobs);
          s.text_offset = offset - job.echo.size();
        }
      }
      s.samples_sent = s.samples.size();
      if (job.chat) {
        Json d = Json::object();
        if (!delta.empty()) d["content"] = delta;
        if (!calls.empty()) {
          Json list = Json::array();
          for (size_t k = 0; k < calls.size(); ++k) list.push_back(ToolCallJson(calls[k], k));
          d["tool_calls"] = std::move(list);
        }
        choice["delta"] = std::move(d);
      } else {
        choice["text"] = s.echoed ? delta : job.echo + delta;
        s.echoed = true;
      }
      choice["logprobs"] = std::move(logprobs);
      choice["finish_reason"] =
          s.done ? Json(!calls.empty() ? "tool_calls" : FinishName(s.finish, s.text.stopped_by_string())) : Json(nullptr);
      if (p.return_token_ids) {
        choice["token_ids"] = TokenIdsJson(std::vector<int32_t>(s.tokens.begin() + static_cast<long>(s.ids_sent), s.tokens.end()));
      }
      s.ids_sent = s.tokens.size();
      Json list = Json::array();
      list.push_back(std::move(choice));
      if (!write(chunk(std::move(list)))) return gone();
    }

    int64_t completion_tokens = 0;
    for (const ChoiceState& s : choices) completion_tokens += static_cast<int64_t>(s.tokens.size());
    const int64_t prompt_tokens = static_cast<int64_t>(job.prompt.size());
    const Json usage = {{"prompt_tokens", prompt_tokens},
                        {"completion_tokens", completion_tokens},
                        {"total_tokens", prompt_tokens + completion_tokens}};

    std::string out;
    if (p.stream) {
      if (p.include_usage) {
        Json j = {{"id", job.id}, {"object", object}, {"created", job.created}, {"model", options.model_name},
                  {"choices", Json::array()}, {"usage", usage}};
        out += "data: " + DumpJson(j) + "\n\n";
      }
      out += "data: [DONE]\n\n";
    } else {
      Json list = Json::array();
      for (size_t c = 0; c < choices.size(); ++c) {
        ChoiceState& s = choices[c];
        Json choice = {{"index", c}};
        if (s.sequence_id != 0) choice["sequence_id"] = SequenceIdString(s.sequence_id);
        std::string finish = FinishName(s.finish, s.text.stopped_by_string());
        if (job.chat) {
          Json message = {{"role", "assistant"}, {"content", s.text.text()}};
          if (job.parse_tools) {
            ParsedToolCalls parsed = ParseToolCalls(job.kind, s.text.text());
            if (!parsed.calls.empty()) {
              message["content"] = parsed.content.empty() ? Json(nullptr) : Json(parsed.content);
              Json calls = Json::array();
              for (const ChatToolCall& call : parsed.calls) calls.push_back(ToolCallJson(call, std::nullopt));
              message["tool_calls"] = std::move(calls);
              finish = "tool_calls";
            }
          }
          choice["message"] = std::move(message);
          choice["logprobs"] =
              p.logprobs ? Json{{"content", ChatLogprobContent(tok, s.samples, with_top)}} : Json(nullptr);
        } else {
          choice["text"] = job.echo + s.text.text();
          if (p.logprobs) {
            Json logprobs = EmptyCompletionLogprobs(with_top);
            size_t offset = job.echo.size();
            AppendCompletionLogprobs(tok, s.samples, with_top, &offset, &logprobs);
            choice["logprobs"] = std::move(logprobs);
          } else {
            choice["logprobs"] = nullptr;
          }
        }
        choice["finish_reason"] = finish;
        if (p.return_token_ids) {
          choice["token_ids"] = TokenIdsJson(s.tokens);
          choice["token_versions"] = s.versions;
        }
        if (p.return_routing && p.routing_binary) {
          const RoutingShape shape = engine->model().routing_shape();
          choice["routing"] = RoutingBase64(s.routing, shape);
          choice["routing_shape"] = {static_cast<int64_t>(s.routing.size()), shape.moe_layers, shape.k};
          choice["routing_id_bytes"] = shape.IdBytes();
        } else if (p.return_routing) {
          choice["routing"] = RoutingJson(s.routing, engine->model().routing_shape().k);
        }
        list.push_back(std::move(choice));
      }
      Json j = {{"id", job.id}, {"object", object}, {"created", job.created}, {"model", options.model_name},
                {"choices", std::move(list)}, {"usage", usage}};
      if (p.return_token_ids) j["prompt_token_ids"] = TokenIdsJson(job.prompt);
      out = DumpJson(j);
    }
    if (!write(out)) return gone();
    metrics.ObserveRequest(job.endpoint, 200, SecondsSince(job.arrived));
    return Status::Ok();
  };
  return reply;
}

Result<StreamResponse> OpenAiServer::Impl::Score(const HttpRequest& http_request) {
  const std::string endpoint = kScorePath;
  const Clock::time_point arrived = Clock::now();
  if (auto e = CheckAuth(http_request)) return Fail(endpoint, arrived, *e);
  Json body;
  if (auto e = ParseJsonBody(http_request.body, &body)) return Fail(endpoint, arrived, *e);
  ScoreRequest request;
  if (auto e = ReadScoreRequest(body, &request)) return Fail(endpoint, arrived, *e);
  if (auto e = CheckModel(request.model)) return Fail(endpoint, arrived, *e);
  const int64_t vocab = engine->model().config().vocab_size;
  auto outside_vocab = [&](const char* field, const std::vector<int32_t>& ids) -> std::optional<ApiError> {
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] >= vocab) {
        return InvalidRequest(field, "token " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                                         " is outside the vocabulary of " + std::to_string(vocab) + " tokens");
      }
    }
    return std::nullopt;
  };
  if (auto e = outside_vocab("prompt_token_ids", request.prompt_token_ids)) return Fail(endpoint, arrived, *e);
  if (auto e = outside_vocab("token_ids", request.token_ids)) return Fail(endpoint, arrived, *e);
  const int64_t prompt_tokens = static_cast<int64_t>(request.prompt_token_ids.size());
  const int64_t scored_tokens = static_cast<int64_t>(request.token_ids.size());
  const int64_t limit = engine->max_model_len();
  if (prompt_tokens + scored_tokens > limit) {
    return Fail(endpoint, arrived,
                InvalidRequest("token_ids",
                               "This model's maximum context length is " + std::to_string(limit) +
                                   " tokens; the request has " + std::to_string(prompt_tokens + scored_tokens) +
                                   " (" + std::to_string(prompt_tokens) + " in prompt_token_ids, " +
                                   std::to_string(scored_tokens) + " in token_ids).",
                               "context_length_exceeded"));
  }

  GenerationRequest generation;
  const RoutingShape shape = engine->model().routing_shape();
  if (request.routing_given && shape.empty()) {
    return Fail(endpoint, arrived, InvalidRequest("routing", "model " + options.model_name + " has no MoE layers"));
  }
  if (request.routing_binary) {
    // Unpacked into the JSON form's [token][moe_layer][k], so that both
    // forms pass the same checks below and in the engine.
    if (request.routing_id_bytes && *request.routing_id_bytes != shape.IdBytes()) {
      return Fail(endpoint, arrived,
                  InvalidRequest("routing_id_bytes", "the model's " + std::to_string(shape.num_experts) +
                                                         " experts take " + ByteCount(shape.IdBytes()) +
                                                         " an id, got " + std::to_string(*request.routing_id_bytes)));
    }
    const int64_t bytes = static_cast<int64_t>(request.routing_packed.size());
    if (bytes % shape.TokenBytes() != 0) {
      return Fail(endpoint, arrived,
                  InvalidRequest("routing", ByteCount(bytes) + " of routing are not a whole number of tokens of " +
                                                ByteCount(shape.TokenBytes()) + " (" + std::to_string(shape.moe_layers) +
                                                " MoE layers x " + std::to_string(shape.k) + " ids x " +
                                                ByteCount(shape.IdBytes()) + ")"));
    }
    std::vector<int32_t> ids;
    for (int64_t t = 0; t < bytes / shape.TokenBytes(); ++t) {
      ids.clear();
      UnpackRouting(shape, request.routing_packed, t, &ids);
      auto& layers = request.routing.emplace_back(static_cast<size_t>(shape.moe_layers));
      for (int64_t l = 0; l < shape.moe_layers; ++l) {
        layers[l].assign(ids.begin() + l * shape.k, ids.begin() + (l + 1) * shape.k);
      }
    }
  }
  if (request.routing_given) {
    const int64_t given = static_cast<int64_t>(request.routing.size());
    const int64_t all = prompt_tokens + scored_tokens;
    if (given != all && given != all - 1) {
      return Fail(endpoint, arrived,
                  InvalidRequest("routing", std::to_string(given) + " tokens of routing for " + std::to_string(all) +
                                                " tokens (" + std::to_string(prompt_tokens) + " in prompt_token_ids, " +
                                                std::to_string(scored_tokens) + " in token_ids); send " +
                                                std::to_string(all) + ", or " + std::to_string(all - 1) +
                                                " as return_routing gives them"));
    }
    for (int64_t t = 0; t < given; ++t) {
      const auto& layers = request.routing[t];
      const std::string tp = "routing[" + std::to_string(t) + "]";
      if (static_cast<int64_t>(layers.size()) != shape.moe_layers) {
        return Fail(endpoint, arrived, InvalidRequest("routing", tp + ": " + std::to_string(layers.size()) +
                                                                     " layers, the model has " +
                                                                     std::to_string(shape.moe_layers) + " MoE layers"));
      }
      for (int64_t l = 0; l < shape.moe_layers; ++l) {
        if (static_cast<int64_t>(layers[l].size()) != shape.k) {
          return Fail(endpoint, arrived,
                      InvalidRequest("routing", tp + "[" + std::to_string(l) + "]: " + std::to_string(layers[l].size()) +
                                                    " expert ids, the model routes each token to " +
                                                    std::to_string(shape.k)));
        }
        generation.score_routing.insert(generation.score_routing.end(), layers[l].begin(), layers[l].end());
      }
    }
  }
  generation.prompt = request.prompt_token_ids;
  generation.score_tokens = request.token_ids;
  generation.score_full_vocab = request.full_vocab;
  generation.sampling.temperature = request.temperature;
  generation.sampling.top_logprobs = request.top_logprobs;
  generation.max_tokens = 0;
  Result<std::shared_ptr<RequestStream>> submitted = engine->Submit(std::move(generation));
  if (!submitted.ok()) {
    ApiError e = ApiErrorFromStatus(submitted.status());
    if (e.param.rfind("routing[", 0) == 0) e.param = "routing";  // the message keeps the position
    return Fail(endpoint, arrived, e);
  }
  std::shared_ptr<RequestStream> stream = std::move(submitted).value();

  const bool binary = request.format == ScoreFormat::kF32;
  StreamResponse reply;
  reply.status = 200;
  if (binary) {
    reply.content_type = "application/octet-stream";
    reply.headers.emplace("X-Flashroll-Rows", std::to_string(scored_tokens));
    reply.headers.emplace("X-Flashroll-Vocab-Size", std::to_string(vocab));
  } else {
    reply.content_type = kJsonType;
  }
  reply.produce = [this, request = std::move(request), stream, endpoint, arrived, binary, vocab, prompt_tokens,
                   scored_tokens](ChunkWriter& writer) -> Status {
    static_assert(std::endian::native == std::endian::little, "the f32 body is little-endian float32");
    const size_t row_bytes = static_cast<size_t>(vocab) * sizeof(float);
    auto gone = [&]() {
      stream->Cancel();
      metrics.ObserveRequest(endpoint, 499, SecondsSince(arrived));
      return Status::Unavailable("client went away; score request cancelled");
    };
    // The JSON arrays, written by hand so that each float32 has its
    // shortest digits (AppendFloatJson).
    std::string logprobs = "[";
    std::string top = "[";
    std::string pending;  // f32 rows not yet written
    int64_t rows = 0;
    Clock::time_point last_write = Clock::now();
    FinishReason finish = FinishReason::kNone;
    while (true) {
      // JSON may lead with whitespace: a write every kIdleWrite finds out
      // whether the client is still there. A binary body has no such filler.
      if (!binary && Clock::now() - last_write >= kIdleWrite) {
        last_write = Clock::now();
        if (!writer.Write(" ")) return gone();
      }
      bool timed_out = false;
      std::optional<StreamEvent> event = stream->Next(kIdleWrite, &timed_out);
      if (timed_out) continue;
      if (!event) break;
      if (event->finish != FinishReason::kNone) finish = event->finish;
      if (!event->has_token) continue;
      ++rows;
      if (binary) {
        if (event->vocab_logprobs.size() * sizeof(float) != row_bytes) {
          stream->Cancel();
          metrics.ObserveRequest(endpoint, 500, SecondsSince(arrived));
          return Status::Internal("score: a row of " + std::to_string(event->vocab_logprobs.size()) +
                                  " logprobs, expected " + std::to_string(vocab));
        }
        const size_t at = pending.size();
        pending.resize(at + row_bytes);
        std::memcpy(pending.data() + at, event->vocab_logprobs.data(), row_bytes);
        if (pending.size() >= kBinaryChunkBytes) {
          last_write = Clock::now();
          if (!writer.Write(pending)) return gone();
          pending.clear();
        }
      } else {
        if (rows > 1) logprobs += ',';
        AppendFloatJson(event->token.logprob, &logprobs);
        if (request.top_logprobs > 0) {
          top += rows > 1 ? ",[" : "[";
          for (size_t k = 0; k < event->token.top.size(); ++k) {
            if (k > 0) top += ',';
            top += "{\"token_id\":" + std::to_string(event->token.top[k].token) + ",\"logprob\":";
            AppendFloatJson(event->token.top[k].logprob, &top);
            top += '}';
          }
          top += ']';
        }
      }
    }
    if (finish == FinishReason::kAbort || rows != scored_tokens) {
      // The status line is out: cut the body so the client sees a failure.
      metrics.ObserveRequest(endpoint, 500, SecondsSince(arrived));
      return Status::Internal("score: the engine ended the request after " + std::to_string(rows) + " of " +
                              std::to_string(scored_tokens) + " tokens");
    }
    if (binary) {
      if (!writer.Write(pending)) return gone();
    } else {
      const Json usage = {{"prompt_tokens", prompt_tokens},
                          {"scored_tokens", scored_tokens},
                          {"total_tokens", prompt_tokens + scored_tokens}};
      std::string out = "{\"id\":" + DumpJson(NewResponseId("score-")) + ",\"object\":\"score\",\"model\":" +
                        DumpJson(options.model_name) + ",\"logprobs\":" + logprobs + "]";
      if (request.top_logprobs > 0) out += ",\"top_logprobs\":" + top + "]";
      out += ",\"usage\":" + DumpJson(usage) + "}";
      if (!writer.Write(out)) return gone();
    }
    metrics.ObserveRequest(endpoint, 200, SecondsSince(arrived));
    return Status::Ok();
  };
  return reply;
}

HttpResponse OpenAiServer::Impl::SequenceRoute(const HttpRequest& request, const std::string& action) {
  const Clock::time_point arrived = Clock::now();
  auto answer = [&](int status, const Json& body) {
    metrics.ObserveRequest(kSequencesPath, status, SecondsSince(arrived));
    return RawJson(status, body);
  };
  int client = 0;
  if (auto e = CheckAuth(request, &client)) return answer(e->http_status, e->ToJson());
  auto it = request.path_params.find("id");
  const std::string text = it == request.path_params.end() ? std::string() : it->second;
  std::optional<uint64_t> id = ParseSequenceId(text);
  // Another client's sequence is as unknown as one that never was.
  if (!id || *id == 0 || !owners.Owns(*id, client)) {
    ApiError e;
    e.http_status = 404;
    e.code = "sequence_not_found";
    e.message = "no sequence \"" + text + "\" (sequence ids are the decimal strings in a choice's sequence_id)";
    return answer(404, e.ToJson());
  }
  Status done = Status::Ok();
  if (action == "pause") done = engine->Pause(*id);
  if (action == "resume") done = engine->Resume(*id);
  if (!done.ok()) {
    const ApiError e = SequenceError(done);
    return answer(e.http_status, e.ToJson());
  }
  Result<SequenceInfo> info = engine->GetSequence(*id);
  if (!info.ok()) {
    // It finished between the action and the look.
    const ApiError e = SequenceError(info.status());
    return answer(e.http_status, e.ToJson());
  }
  return answer(200, SequenceJson(*info));
}

HttpResponse OpenAiServer::Impl::LoadWeights(const HttpRequest& request) {
  const Clock::time_point arrived = Clock::now();
  auto answer = [&](int status, const Json& body) {
    metrics.ObserveRequest(kWeightsPath, status, SecondsSince(arrived));
    return RawJson(status, body);
  };
  if (auto e = CheckAuth(request)) return answer(e->http_status, e->ToJson());
  Json body;
  if (auto e = ParseJsonBody(request.body, &body)) return answer(e->http_status, e->ToJson());
  WeightsRequest weights_request;
  if (auto e = ReadWeightsRequest(body, &weights_request)) return answer(e->http_status, e->ToJson());
  CheckpointProblem problem;
  Status started = weights->Start(weights_request.path, weights_request.version, &problem);
  if (!started.ok()) {
    ApiError e = ApiErrorFromStatus(started);
    e.param = !problem.param.empty()                        ? problem.param
              : started.code() == Code::kFailedPrecondition ? "version"
                                                            : "path";
    return answer(e.http_status, e.ToJson());
  }
  return answer(202, Json{{"object", "weights.load"},
                          {"status", "loading"},
                          {"path", weights_request.path},
                          {"version", weights_request.version}});
}

HttpResponse OpenAiServer::Impl::WeightsStatus(const HttpRequest& request) {
  const Clock::time_point arrived = Clock::now();
  if (auto e = CheckAuth(request)) {
    metrics.ObserveRequest(kWeightsPath, e->http_status, SecondsSince(arrived));
    return RawJson(e->http_status, e->ToJson());
  }
  const WeightLoaderState s = weights->state();
  Json last_error = nullptr;
  if (s.last_error_version) last_error = Json{{"version", *s.last_error_version}, {"message", s.last_error}};
  Json reply = {{"object", "weights"},
                {"version", s.version},
                {"pending_version", s.pending_version ? Json(*s.pending_version) : Json(nullptr)},
                {"pending_path", s.pending_version ? Json(s.pending_path) : Json(nullptr)},
                {"last_error", std::move(last_error)},
                {"checkpoint_root_configured", s.configured}};
  metrics.ObserveRequest(kWeightsPath, 200, SecondsSince(arrived));
  return RawJson(200, reply);
}

void OpenAiServer::Impl::AddRoutes() {
  http->HandleStream(HttpMethod::kPost, kCompletionsPath,
                     [this](const HttpRequest& r) { return Completions(r); });
  http->HandleStream(HttpMethod::kPost, kChatPath, [this](const HttpRequest& r) { return Chat(r); });
  http->HandleStream(HttpMethod::kPost, kScorePath, [this](const HttpRequest& r) { return Score(r); });
  http->HandleRaw(HttpMethod::kGet, "/v1/sequences/:id",
                  [this](const HttpRequest& r) -> Result<HttpResponse> { return SequenceRoute(r, ""); });
  http->HandleRaw(HttpMethod::kPost, "/v1/sequences/:id/pause",
                  [this](const HttpRequest& r) -> Result<HttpResponse> { return SequenceRoute(r, "pause"); });
  http->HandleRaw(HttpMethod::kPost, "/v1/sequences/:id/resume",
                  [this](const HttpRequest& r) -> Result<HttpResponse> { return SequenceRoute(r, "resume"); });
  sessions->AddTo(*http);
  http->HandleRaw(HttpMethod::kPost, kWeightsPath,
                  [this](const HttpRequest& r) -> Result<HttpResponse> { return LoadWeights(r); });
  http->HandleRaw(HttpMethod::kGet, kWeightsPath,
                  [this](const HttpRequest& r) -> Result<HttpResponse> { return WeightsStatus(r); });
  http->HandleRaw(HttpMethod::kGet, "/v1/models", [this](const HttpRequest& r) -> Result<HttpResponse> {
    if (auto e = CheckAuth(r)) return RawJson(e->http_status, e->ToJson());
    Json model = {{"id", options.model_name},
                  {"object", "model"},
                  {"created", started_at},
                  {"owned_by", "flashroll"},
                  {"max_model_len", engine->max_model_len()}};
    return RawJson(200, Json{{"object", "list"}, {"data", Json::array({model})}});
  });
  http->HandleRaw(HttpMethod::kGet, "/health", [](const HttpRequest&) -> Result<HttpResponse> {
    return RawJson(200, Json{{"status", "ok"}});
  });
  http->HandleRaw(HttpMethod::kGet, "/metrics", [this](const HttpRequest&) -> Result<HttpResponse> {
    HttpResponse r;
    r.content_type = "text/plain; version=0.0.4";
    r.body = metrics.Render(engine->Stats());
    return r;
  });
  // Everything else: OpenAI-style 404 (401 first under /v1 without the key).
  auto not_found = [this](const HttpRequest& r) -> Result<HttpResponse> {
    if (r.path.rfind("/v1/", 0) == 0) {
      if (auto e = CheckAuth(r)) return RawJson(e->http_status, e->ToJson());
    }
    ApiError e;
    e.http_status = 404;
    e.message = std::string("no route for ") + HttpMethodName(r.method) + " " + r.path;
    e.code = "not_found";
    return RawJson(404, e.ToJson());
  };
  for (HttpMethod method : {HttpMethod::kGet, HttpMethod::kPost, HttpMethod::kPut, HttpMethod::kDelete}) {
    http->HandleRaw(method, "/*path", not_found);
  }
}

Result<std::unique_ptr<OpenAiServer>> OpenAiServer::Start(Engine* engine, const Tokenizer* tokenizer,
                                                          OpenAiServerOptions options) {
  if (options.model_name.empty()) return Status::InvalidArgument("served model name: must not be empty");
  if (engine == nullptr || tokenizer == nullptr) return Status::InvalidArgument("an engine and a tokenizer are required");
  std::unique_ptr<OpenAiServer> server(new OpenAiServer(options));
  server->impl_ = std::make_unique<Impl>();
  Impl& s = *server->impl_;
  s.engine = engine;
  s.tokenizer = tokenizer;
  s.options = options;
  s.keys = std::make_unique<ApiKeys>(options.api_keys);
  s.sessions = std::make_unique<SessionRoutes>(engine, tokenizer, s.keys.get(), &s.owners, &s.metrics,
                                               options.model_name, options.default_max_tokens);
  FR_ASSIGN_OR_RETURN(s.weights, WeightLoader::Create(engine, options.checkpoint_root));
  if (tokenizer->chat_template().empty()) {
    s.chat_format_error = Status::Unimplemented("the tokenizer config has no chat_template");
  } else {
    Result<std::unique_ptr<ChatFormat>> format = ChatFormat::FromTemplate(tokenizer->chat_template(), *tokenizer);
    if (format.ok()) {
      s.chat_format = std::move(format).value();
    } else {
      s.chat_format_error = format.status();
      log::Warn("chat completions disabled: the chat template is not usable", {{"error", format.status().ToString()}});
    }
  }
  HttpServerOptions http;
  http.host = options.host;
  http.port = options.port;
  http.max_body_bytes = 32u << 20;
  http.read_timeout = std::chrono::milliseconds(30000);
  // A slow client must not hold a stream's write (and so the engine's
  // sequence) for long.
  http.write_timeout = std::chrono::milliseconds(10000);
  http.worker_threads = std::max<size_t>(1, options.max_connections);
  http.refuse_when_busy = true;
  http.name = "openai";
  s.http = std::make_unique<HttpServer>(http);
  s.AddRoutes();
  FR_RETURN_IF_ERROR(s.http->Start());
  return server;
}

OpenAiServer::OpenAiServer(OpenAiServerOptions options) : options_(std::move(options)) {}

OpenAiServer::~OpenAiServer() { Stop(); }

void OpenAiServer::Stop() {
  // Requests waiting for a min_version end first: the HTTP server's Stop
  // waits for every request in flight.
  if (impl_ && impl_->weights) impl_->weights->Stop();
  if (impl_ && impl_->http) impl_->http->Stop();
}

int OpenAiServer::port() const { return impl_->http->port(); }

std::string OpenAiServer::base_url() const { return impl_->http->base_url(); }

}  // namespace flashroll::engine
