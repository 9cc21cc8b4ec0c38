// OpenAI request bodies read into typed requests, and OpenAI-style errors.
//
// /v1/completions and /v1/chat/completions bodies are parsed here and
// nowhere else: every field is checked for type and range, and the first
// bad one is reported as a 400 naming it:
//   {"error": {"message": "max_tokens: must be at least 1, got -5",
//              "type": "invalid_request_error", "param": "max_tokens", "code": null}}
// Fields OpenAI defines but this server cannot honour (logit_bias, suffix,
// best_of != n, response_format other than text, tool_choice forcing a
// function) are refused the same way rather than silently ignored; fields it
// does not know are ignored, as OpenAI's own API does for new client fields.
//
// Thread safety: free functions, reentrant.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "common/status.h"
#include "engine/sampling/sampler.h"
#include "engine/tokenizer/chat_format.h"

namespace flashroll::engine {

// An error reply in OpenAI's shape.
struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field; "" is sent as null
  std::string code;   // e.g. "model_not_found", "context_length_exceeded"; "" is sent as null

  // {"error": {"message", "type", "param", "code"}}.
  Json ToJson() const;
};

// A 400 invalid_request_error naming `param`; the message is "param: why"
// (just `why` when param is empty).
ApiError InvalidRequest(std::string param, std::string why, std::string code = "");

// The ApiError for a Status from the engine or tokenizer: the HTTP status
// follows the code (HttpStatusFromCode), the type is invalid_request_error
// for 4xx and server_error for 5xx, and the param is the field that leads
// the message ("max_tokens: ..." names max_tokens), if any.
ApiError ApiErrorFromStatus(const Status& status);

// Fields shared by both generation endpoints.
struct GenerationParams {
  std::string model;
  std::optional<int64_t> max_tokens;  // absent: the endpoint's default
  int32_t n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  SamplingParams sampling;     // temperature 1 unless given; seed random unless given
  std::vector<std::string> stop;
  bool logprobs = false;         // report each token's logprob
  int32_t top_logprobs = 0;      // alternatives per token, 0-20
  bool return_token_ids = false;  // vLLM's extension: token_ids per choice, prompt_token_ids
  bool ignore_eos = false;        // vLLM's extension
  std::vector<int32_t> stop_token_ids;  // vLLM's extension: a choice ends at any of these (kept)
  // Flashroll's, MoE models, not with stream: each choice's "routing", the
  // experts of every token the model computed (openai_server.h), as nested
  // JSON arrays or (routing_format "binary") one base64 string.
  bool return_routing = false;
  bool routing_binary = false;
  // Flashroll's: submit only once the engine serves weight version
  // min_version or later, waiting at most min_version_timeout (forever when
  // absent, or until the server stops).
  std::optional<int64_t> min_version;
  std::optional<std::chrono::milliseconds> min_version_timeout;
  // Flashroll's: finish on the weight version the request started on
  // (GenerationRequest::pin_version).
  bool pin_version = false;
};

struct CompletionRequest {
  GenerationParams params;
  bool prompt_is_tokens = false;
  std::string prompt_text;             // when !prompt_is_tokens
  std::vector<int32_t> prompt_tokens;  // when prompt_is_tokens
  bool echo = false;                   // the prompt's text is put before each choice's text
};

struct ChatRequest {
  GenerationParams params;
  std::vector<ChatMessage> messages;    // "developer" is read as "system"
  std::vector<std::string> tools_json;  // each {"type": "function", "function": {...}} as JSON text
  bool tool_choice_none = false;        // tool_choice "none": tools are rendered, calls not parsed
  // reasoning_effort: "low", "high", "max" or an integer 1-100, as a JSON
  // string or number (common/reasoning_effort.h); absent or null: none.
  std::optional<int> reasoning_effort;
};

// The request's messages as the model sees them: with a reasoning_effort,
// ReasoningEffortLine(b) becomes the last line of the first system message
// (one is put first when there is none), exactly as Scaffold::SystemPrompt
// writes it for training (both call WithReasoningEffort); without one, the
// messages unchanged.
std::vector<ChatMessage> MessagesWithReasoningEffort(const ChatRequest& request);

// POST /v1/score: the raw logprob of each of token_ids given the prompt and
// the tokens before it.
enum class ScoreFormat { kJson, kF32 };
struct ScoreRequest {
  std::string model;
  std::vector<int32_t> prompt_token_ids;  // at least one
  std::vector<int32_t> token_ids;         // at least one
  double temperature = 1.0;               // [0, 2], as generation; 0 scores as 1 (greedy's logprobs)
  int32_t top_logprobs = 0;               // 0-20 alternatives per token (json only)
  bool full_vocab = false;                // the whole log-softmax per token (f32 only)
  ScoreFormat format = ScoreFormat::kJson;
  // MoE models: the experts to score with, [token][moe_layer][k], for
  // prompt_token_ids then token_ids (all, or all but the last). Read here
  // as arrays of arrays of non-negative ints; their lengths are checked by
  // the server, which knows the model. Without "routing" (routing_given
  // false) the router picks; an empty one is a routing of the wrong length.
  bool routing_given = false;
  std::vector<std::vector<std::vector<int32_t>>> routing;
  // "routing" given as a base64 string instead: the decoded bytes, packed as
  // return_routing's binary form (openai_server.h), and "routing_id_bytes"
  // if given (1 or 2). The server checks both against the model's routing
  // shape and unpacks them into `routing`.
  bool routing_binary = false;
  std::vector<uint8_t> routing_packed;
  std::optional<int64_t> routing_id_bytes;
};

// POST /v1/weights: load the checkpoint directory `path` (relative to the
// server's checkpoint root) as weight version `version`.
struct WeightsRequest {
  std::string path;
  int64_t version = 0;  // at least 1
};

// POST /v1/sessions/{id}/append: exactly one of token_ids (non-empty) and
// text (non-empty, tokenised as plain text by the server).
struct SessionAppendRequest {
  bool is_tokens = false;
  std::vector<int32_t> token_ids;
  std::string text;
};

// POST /v1/sessions/{id}/pause: "to" is "memory" (the default) or "disk".
struct SessionPauseRequest {
  bool to_disk = false;
};

// Parses a request body as one JSON object. A malformed body gives
// "malformed JSON: parse error at byte B (line L, column C): ...".
std::optional<ApiError> ParseJsonBody(std::string_view body, Json* out);

// Reads a parsed body. Returns the first bad field, or nullopt with *out
// filled. A missing seed is drawn at random, so unseeded requests differ.
std::optional<ApiError> ReadCompletionRequest(const Json& body, CompletionRequest* out);
std::optional<ApiError> ReadChatRequest(const Json& body, ChatRequest* out);
// Types, ranges and the pairing of full_vocab with format "f32" (both or
// neither; top_logprobs only with json). Token ids are checked against the
// vocabulary and the context by the server, which knows them.
std::optional<ApiError> ReadScoreRequest(const Json& body, ScoreRequest* out);
std::optional<ApiError> ReadSessionAppendRequest(const Json& body, SessionAppendRequest* out);
// /v1/completions' generation fields with "model" required; n, stream,
// return_routing, pin_version and min_version are refused (a session's turn
// is one choice, answered whole, on the weights of the moment).
std::optional<ApiError> ReadSessionGenerateRequest(const Json& body, GenerationParams* out);
std::optional<ApiError> ReadSessionPauseRequest(const Json& body, SessionPauseRequest* out);
// A non-empty path and an integer version of at least 1, both required.
std::optional<ApiError> ReadWeightsRequest(const Json& body, WeightsRequest* out);

}  // namespace flashroll::engine
