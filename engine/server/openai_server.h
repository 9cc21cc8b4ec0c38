// OpenAiServer: an OpenAI-compatible HTTP API over an Engine.
//
// Routes:
//   GET  /v1/models             the one served model
//   POST /v1/completions        prompt as text or token ids; "return_token_ids"
//                               adds token_ids per choice and prompt_token_ids
//   POST /v1/chat/completions   messages through the model's chat template
//                               (chat_format.h); tools in, tool_calls out
//                               (tool_calls.h)
//   GET  /health                200 {"status": "ok"} while serving
//   GET  /metrics               Prometheus text (server_metrics.h)
// Both generation routes take n, seed, temperature, top_p, top_k, min_p,
// presence/frequency/repetition penalties, stop, max_tokens, logprobs and
// top_logprobs, and "stream": true for server-sent events ending in
// "data: [DONE]". Request bodies are read in openai_request.h; every error
// is an OpenAI-style JSON body (ApiError) with a 4xx/5xx status, never a
// dropped connection (except a stream cut by the client).
//
// With an API key, /v1/* needs "Authorization: Bearer <key>" (401
// otherwise); /health and /metrics stay open for probes and scrapers.
//
// A streaming request whose client goes away is cancelled as soon as a
// write fails (each token is a write; an idle stream sends an SSE comment
// every 0.5 s), which frees its sequences and KV blocks at the engine's next
// step. Connections beyond max_connections are answered 429
// (HttpServerOptions::refuse_when_busy).
//
// Thread safety: Start/Stop from one thread; requests are served
// concurrently on the HTTP server's workers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/http.h"
#include "common/status.h"
#include "engine/server/server_metrics.h"
#include "engine/serving/engine.h"
#include "engine/tokenizer/chat_format.h"
#include "engine/tokenizer/tokenizer.h"

namespace flashroll::engine {

struct OpenAiServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                // 0: an ephemeral port (port() tells which)
  std::string api_key;            // empty: no authentication
  std::string model_name;         // the name clients send as "model"; required
  size_t max_connections = 64;    // concurrent connections; more get 429
  int64_t default_max_tokens = 16;  // /v1/completions without max_tokens (OpenAI's default)
};

class OpenAiServer {
 public:
  // Binds and starts serving. `engine` and `tokenizer` must outlive the
  // server. A model without a recognised chat template is served too: its
  // /v1/chat/completions answers 400 saying why. Errors: an empty
  // model_name, the bind failure ("bind 127.0.0.1:8000: Address already in use").
  static Result<std::unique_ptr<OpenAiServer>> Start(Engine* engine, const Tokenizer* tokenizer,
                                                     OpenAiServerOptions options);
  ~OpenAiServer();  // Stop()
  OpenAiServer(const OpenAiServer&) = delete;
  OpenAiServer& operator=(const OpenAiServer&) = delete;

  // Stops accepting, ends open streams, waits for requests in flight.
  void Stop();

  int port() const;
  std::string base_url() const;
  const std::string& model_name() const { return options_.model_name; }

 private:
  struct Impl;
  explicit OpenAiServer(OpenAiServerOptions options);

  OpenAiServerOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace flashroll::engine
