// Policy: where an episode's assistant turns come from, token ids in and
// out — the embedded serving engine (EnginePolicy, the default), or an
// OpenAI-compatible server (OpenAiPolicy, a job's `policy.url`) through
// POST /v1/completions with the prompt as token ids, "return_token_ids",
// "logprobs" and "stop_token_ids" (vLLM and Flashroll both take these).
// Either way the episode records each sampled token with its raw logprob
// and the weight version that produced it: Flashroll's server reports
// token_versions; a server that does not is taken as version 0.
//
// Thread safety: a Policy is shared by many episodes at once; Generate is
// thread-safe in both implementations.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/serving/engine.h"

namespace flashroll {

struct PolicyRequest {
  std::vector<int32_t> prompt;       // the whole conversation so far
  int64_t max_tokens = 16;
  std::vector<int32_t> stop_tokens;  // the turn ends at any of these (kept)
  double temperature = 1.0;
  uint64_t seed = 0;
};

struct PolicyToken {
  int32_t token = 0;
  float logprob = 0;  // log_softmax(logits / T) of the token, no penalties or truncation
  int64_t version = 0;
};

// What the engine computed for one episode in prefill passes, and of that
// recomputed (engine::EngineStats::prefill_tokens, reprefill_tokens); zero
// where the policy does not say (a server).
struct PrefillCounts {
  int64_t prefill_tokens = 0;
  int64_t reprefill_tokens = 0;
};

// One episode's conversation with the policy. Each turn names the whole
// conversation so far (PolicyRequest::prompt), which only grows: the
// earlier turns' tokens, each followed by what the episode appended.
class PolicySession {
 public:
  virtual ~PolicySession() = default;
  // As Policy::Generate.
  virtual Result<bool> Generate(const PolicyRequest& request, const std::function<void(const PolicyToken&)>& on_token,
                                const std::function<bool()>& interrupted) = 0;
  virtual PrefillCounts counts() const { return {}; }
};

class Policy {
 public:
  virtual ~Policy() = default;
  // The longest conversation the policy serves, prompt included.
  virtual int64_t max_model_len() const = 0;
  // Generates one turn, passing each token to `on_token` in order, until a
  // stop token or max_tokens. `interrupted` is polled between tokens where
  // the policy can (the engine; an HTTP request runs to its end); returns
  // true when it stopped the turn. Errors: the engine's or the server's,
  // naming the endpoint.
  virtual Result<bool> Generate(const PolicyRequest& request, const std::function<void(const PolicyToken&)>& on_token,
                                const std::function<bool()>& interrupted) = 0;
  // A conversation for one episode. By default each turn is a Generate of
  // its own with the whole conversation.
  virtual Result<std::unique_ptr<PolicySession>> OpenSession();
};

// The embedded engine (which must outlive the policy). With `sessions`, an
// episode is one engine session (Engine::OpenSession): its sequence stays
// paused with its KV while the tool runs, the tool's tokens are appended
// and the next turn computes only them, across weight swaps too. Without,
// each turn is a new request with the whole conversation, which the prefix
// cache finds only under the weights that computed it (a swap recomputes
// the history); its recomputed positions are counted all the same
// (GenerationRequest::computed_before).
std::unique_ptr<Policy> EnginePolicy(engine::Engine& engine, bool sessions = true);

struct OpenAiPolicyOptions {
  std::string url;           // http://HOST:PORT of the server
  std::string model;         // the "model" of each request
  std::string api_key;       // sent as a bearer token when not empty
  int64_t max_model_len = 0;  // the conversation limit (the tokenizer's model's context)
};

// Errors: InvalidArgument for a URL that is not http(s)://host[:port].
Result<std::unique_ptr<Policy>> OpenAiPolicy(const OpenAiPolicyOptions& options);

}  // namespace flashroll
