// OpenAiServer: an OpenAI-compatible HTTP API over an Engine.
//
// Routes:
//   GET  /v1/models             the one served model
//   POST /v1/completions        prompt as text or token ids; "return_token_ids"
//                               adds token_ids (and, unstreamed, token_versions:
//                               the weight version of each) per choice and
//                               prompt_token_ids; "stop_token_ids" ends a
//                               choice at any of those tokens (kept)
//   POST /v1/chat/completions   messages through the model's chat template
//                               (chat_format.h); tools in, tool_calls out
//                               (tool_calls.h)
//   POST /v1/score              the raw logprob (log_softmax(logits / T), no
//                               penalties or truncation) of each of token_ids
//                               after prompt_token_ids and the tokens before
//                               it — bitwise what generation recorded for it
//                               at that temperature (sampler.h); JSON
//                               {"logprobs": [...], "top_logprobs": [[{"token_id",
//                               "logprob"}, ...], ...] (top_logprobs > 0), "usage"},
//                               or with "full_vocab": true and "format": "f32" an
//                               application/octet-stream body: little-endian
//                               float32 [len(token_ids)][vocab] row-major, row i the
//                               log-softmax before token_ids[i] (headers
//                               X-Flashroll-Rows and X-Flashroll-Vocab-Size)
//   GET  /v1/sequences/{id}     {"id", "object": "sequence", "state" (waiting,
//                               running, paused), "prompt_tokens",
//                               "generated_tokens", "kv_blocks"}
//   POST /v1/sequences/{id}/pause, /v1/sequences/{id}/resume
//                               pause at the next token boundary / continue
//                               exactly as if never stopped (Engine::Pause);
//                               200 with the sequence as GET shows it, 404 for
//                               an unknown or finished sequence, 409 when
//                               already paused / not paused
//   POST /v1/weights            {"path": DIR, "version": N}: load the Hugging Face
//                               checkpoint DIR (relative to checkpoint_root;
//                               config.json + safetensors) as weight version N.
//                               Answered once the path is resolved beneath the
//                               root and config.json and the safetensors
//                               headers match the running model (WeightLoader):
//                               202 {"status": "loading"}; the weights load in
//                               the background and the engine swaps them in at
//                               a token boundary without re-prefill. 403 without
//                               a root, for a path out of it (absolute, "..", a
//                               symlink out) or a file that is a FIFO, device or
//                               directory; 400 whose param names the tensor or
//                               config key that differs, or the tensor that
//                               disagrees with manifest.json (the old weights
//                               keep serving; WeightLayout::Check);
//                               404 for a missing file; 409 while another load
//                               runs or when N is not above the current version
//   GET  /v1/weights            {"version", "pending_version", "pending_path",
//                               "last_error": null | {"version", "message"} (the
//                               last failed background load),
//                               "checkpoint_root_configured"}
//   GET  /health                200 {"status": "ok"} while serving
//   GET  /metrics               Prometheus text (server_metrics.h)
// Both generation routes take n, seed, temperature, top_p, top_k, min_p,
// presence/frequency/repetition penalties, stop, max_tokens, logprobs and
// top_logprobs, and "stream": true for server-sent events ending in
// "data: [DONE]"; also "min_version" (wait before submitting until the
// engine serves that weight version or a later one; at most
// "min_version_timeout_ms", then 504; 503 when the server stops first) and
// "pin_version": true (finish on the weight version the request started
// on while a swap moves the others; 400 naming pin_version when
// --weight-memory has no room for two versions);
// and, on MoE models, "return_routing": true (not with stream; 400 naming
// return_routing on a dense model): each choice gets "routing", the experts
// of every token the model computed for it — the prompt's tokens, then each
// generated token but the last (which was sampled, never fed back) —
// indexed [token][moe_layer][k]: routing[t][l] lists the k expert ids token
// t was sent to in the l-th MoE layer (layers whose MLP is dense are left
// out), in the router's order (descending probability). That is
// len(prompt) + len(tokens) - 1 entries, exactly what /v1/score's "routing"
// takes back for the same prompt_token_ids and token_ids. That is
// "routing_format": "json", the default; "routing_format": "binary" gives
// the same ids packed (any routing_format without return_routing, or
// another value, is a 400 naming routing_format): "routing" is the base64
// (RFC 4648, standard alphabet, padded) of T * L * K ids in
// [token][moe_layer][k] row-major order (id j of layer l of token t at
// index (t * L + l) * K + j), each an unsigned little-endian integer of
// "routing_id_bytes" bytes: 1 when the model has at most 256 experts, else
// 2; the choice also carries "routing_shape": [T, L, K] (tokens, MoE
// layers, experts per token) and "routing_id_bytes". That is
// engine/models/routing.h's layout: T * L * K * routing_id_bytes bytes, 4/3
// as many characters in base64. Each choice (and each streamed chunk of it,
// once the engine has made its sequence: not the chat role chunk sent first) carries
// "sequence_id", the engine's id as a string of decimal digits, for the
// /v1/sequences routes (to pause a sequence, stream it: a whole reply comes
// after it has finished). Logprobs are float32 printed with the shortest
// digits that read back as the same float (FloatJson). /v1/score takes
// {"model", "prompt_token_ids", "token_ids", "temperature" (default 1; 0
// scores as 1, as greedy generation records), "top_logprobs" (0-20),
// "full_vocab", "format": "json" | "f32", and on MoE models "routing":
// [token][moe_layer][k] expert ids for prompt_token_ids then token_ids (all
// of them, or all but the last, as return_routing gives them), or the same
// as return_routing's binary base64 string, with "routing_id_bytes" optional
// (a 400 naming it unless it is the model's; it is refused with the JSON
// form)}: each token
// is then run through exactly those experts (routing replay, R3; the gate
// weights are the router's probabilities of those experts, renormalised as
// the model's norm_topk_prob says), so scoring a sample with its returned
// routing gives bitwise the logprobs generation recorded. A routing of
// another length (an empty one included), or a token or layer of another
// size, is a 400 naming "routing" with the position ("routing[3]: 5 layers,
// the model has 6 MoE layers"); so is an expert out of range or repeated
// ("routing[3][1]: expert 9 out of range [0, 8)"), and any routing on a
// dense model. A base64 routing is decoded strictly (common/base64.h: a bad
// character or padding is a 400 naming "routing" and the offset), must hold
// a whole number of tokens ("415 bytes of routing are not a whole number of
// tokens of 12 bytes (6 MoE layers x 2 ids x 1 byte)"), and is then checked
// as the JSON form, token positions included. Request bodies are read in
// openai_request.h; every error is an OpenAI-style JSON body (ApiError) with
// a 4xx/5xx status, never a dropped connection (except a stream cut by the
// client, or a body cut because the engine failed after the status line).
//
// With API keys, /v1/* needs "Authorization: Bearer <key>" with one of
// them (401 otherwise); /health and /metrics stay open for probes and
// scrapers. Each key is a client: a /v1/sequences id or a session is
// answered only to the key whose request made it (404 for any other).
//
// Sessions (session_routes.h): one engine sequence per agent episode, kept
// with its KV between turns:
//   POST   /v1/sessions                {"id": 32 hex digits (128 random bits), "object": "session", ...}
//   GET    /v1/sessions/{id}           the session: tokens, state, kv_blocks, on_disk, prefill counts
//   POST   /v1/sessions/{id}/append    {"token_ids": [...]} or {"text": "..."} (plain text: markup such
//                                      as <|im_end|> is tokenised as text, never as a control token);
//                                      409 while a turn runs
//   POST   /v1/sessions/{id}/generate  a turn over the session's tokens: /v1/completions' generation
//                                      fields ("model" required; n 1, no stream); {"token_ids",
//                                      "text", "logprobs", "token_versions", "finish_reason", "usage"};
//                                      409 while another turn runs
//   POST   /v1/sessions/{id}/pause     {"to": "memory" | "disk"} between turns (disk needs
//                                      --persist-dir: 409 without); 409 during a turn
//   DELETE /v1/sessions/{id}           ends it (a running turn ends with "abort")
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
#include <vector>

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
  // Each a client (clients.h): a request without one of them is a 401,
  // and a client sees only its own sessions and sequences. Empty: no
  // authentication, one client.
  std::vector<std::string> api_keys;
  std::string model_name;         // the name clients send as "model"; required
  size_t max_connections = 64;    // concurrent connections; more get 429
  int64_t default_max_tokens = 16;  // /v1/completions without max_tokens (OpenAI's default)
  std::string checkpoint_root;    // POST /v1/weights loads beneath it; empty: refused (403)
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
