#include "rollout/policy.h"

#include <algorithm>
#include <chrono>

#include "common/http.h"

namespace flashroll {
namespace {

// Reads one turn's stream to its end, or cancels it when `interrupted`
// says so between tokens; *finished gets the counts of its last event.
Result<bool> ReadTurn(engine::RequestStream& stream, const std::function<void(const PolicyToken&)>& on_token,
                      const std::function<bool()>& interrupted, PrefillCounts* finished) {
  // Polled, so an interruption ends the request between tokens.
  while (true) {
    bool timed_out = false;
    auto event = stream.Next(std::chrono::milliseconds(20), &timed_out);
    if (!event) {
      if (!timed_out) return false;
    } else {
      if (event->finish == engine::FinishReason::kAbort) return Status::Unavailable("the engine stopped");
      if (event->has_token) on_token({event->token.token, event->token.logprob, event->version});
      if (event->finish != engine::FinishReason::kNone) *finished = {event->prefill_tokens, event->reprefill_tokens};
    }
    if (interrupted()) {
      stream.Cancel();
      return true;
    }
  }
}

engine::GenerationRequest TurnRequest(const PolicyRequest& request) {
  engine::GenerationRequest r;
  r.max_tokens = request.max_tokens;
  r.stop_tokens = request.stop_tokens;
  r.ignore_eos = true;  // the stop tokens decide
  r.sampling.temperature = request.temperature;
  r.sampling.seed = request.seed;
  return r;
}

// Each turn a request of its own with the whole conversation; it tells the
// engine how far the previous turn computed, so recomputing it is counted.
class EngineTurnsSession : public PolicySession {
 public:
  explicit EngineTurnsSession(engine::Engine& engine) : engine_(engine) {}

  Result<bool> Generate(const PolicyRequest& request, const std::function<void(const PolicyToken&)>& on_token,
                        const std::function<bool()>& interrupted) override {
    engine::GenerationRequest r = TurnRequest(request);
    r.prompt = request.prompt;
    r.computed_before = computed_;
    int64_t sampled = 0;
    FR_ASSIGN_OR_RETURN(std::shared_ptr<engine::RequestStream> stream, engine_.Submit(std::move(r)));
    PrefillCounts turn;
    auto counting = [&](const PolicyToken& t) {
      ++sampled;
      on_token(t);
    };
    Result<bool> stopped = ReadTurn(*stream, counting, interrupted, &turn);
    // Every position but the last sampled token's has its KV computed.
    computed_ = static_cast<int64_t>(request.prompt.size()) + sampled - 1;
    counts_.prefill_tokens += turn.prefill_tokens;
    counts_.reprefill_tokens += turn.reprefill_tokens;
    return stopped;
  }
  PrefillCounts counts() const override { return counts_; }

 private:
  engine::Engine& engine_;
  int64_t computed_ = 0;
  PrefillCounts counts_;
};

// One engine session for the whole episode: each turn appends what the
// conversation gained since the session's last token.
class EngineSession : public PolicySession {
 public:
  EngineSession(engine::Engine& engine, uint64_t id) : engine_(engine), id_(id) {}
  ~EngineSession() override { (void)engine_.CloseSession(id_); }
  EngineSession(const EngineSession&) = delete;
  EngineSession& operator=(const EngineSession&) = delete;

  Result<bool> Generate(const PolicyRequest& request, const std::function<void(const PolicyToken&)>& on_token,
                        const std::function<bool()>& interrupted) override {
    if (interrupted_) return Status::FailedPrecondition("engine session " + std::to_string(id_) + ": its last turn was interrupted");
    if (request.prompt.size() < tokens_.size() || !std::equal(tokens_.begin(), tokens_.end(), request.prompt.begin())) {
      return Status::Internal("engine session " + std::to_string(id_) +
                              ": the conversation does not continue the session's tokens");
    }
    std::vector<int32_t> added(request.prompt.begin() + static_cast<std::ptrdiff_t>(tokens_.size()), request.prompt.end());
    FR_RETURN_IF_ERROR(engine_.AppendToSession(id_, added));
    tokens_ = request.prompt;
    FR_ASSIGN_OR_RETURN(std::shared_ptr<engine::RequestStream> stream, engine_.GenerateInSession(id_, TurnRequest(request)));
    PrefillCounts ignored;  // counts() asks the session itself
    auto keeping = [&](const PolicyToken& t) {
      tokens_.push_back(t.token);
      on_token(t);
    };
    Result<bool> stopped = ReadTurn(*stream, keeping, interrupted, &ignored);
    // A turn cancelled between tokens may leave sampled tokens unread in
    // the session: it cannot go on.
    interrupted_ = !stopped.ok() || *stopped;
    return stopped;
  }

  PrefillCounts counts() const override {
    auto info = engine_.GetSession(id_);
    if (!info.ok()) return {};
    return {info->prefill_tokens, info->reprefill_tokens};
  }

 private:
  engine::Engine& engine_;
  const uint64_t id_;
  std::vector<int32_t> tokens_;  // what the session holds
  bool interrupted_ = false;
};

class EnginePolicyImpl : public Policy {
 public:
  EnginePolicyImpl(engine::Engine& engine, bool sessions) : engine_(engine), sessions_(sessions) {}
  int64_t max_model_len() const override { return engine_.max_model_len(); }

  Result<bool> Generate(const PolicyRequest& request, const std::function<void(const PolicyToken&)>& on_token,
                        const std::function<bool()>& interrupted) override {
    return EngineTurnsSession(engine_).Generate(request, on_token, interrupted);
  }

  Result<std::unique_ptr<PolicySession>> OpenSession() override {
    if (!sessions_) return std::unique_ptr<PolicySession>(std::make_unique<EngineTurnsSession>(engine_));
    FR_ASSIGN_OR_RETURN(uint64_t id, engine_.OpenSession());
    return std::unique_ptr<PolicySession>(std::make_unique<EngineSession>(engine_, id));
  }

 private:
  engine::Engine& engine_;
  const bool sessions_;
};

class OpenAiPolicyImpl : public Policy {
 public:
  OpenAiPolicyImpl(HttpClient client, OpenAiPolicyOptions options) : client_(std::move(client)), options_(std::move(options)) {}
  int64_t max_model_len() const override { return options_.max_model_len; }

  Result<bool> Generate(const PolicyRequest& request, const std::function<void(const PolicyToken&)>& on_token,
                        const std::function<bool()>& interrupted) override {
    if (interrupted()) return true;
    const Json body = {{"model", options_.model},
                       {"prompt", request.prompt},
                       {"max_tokens", request.max_tokens},
                       {"temperature", request.temperature},
                       {"seed", request.seed},
                       {"stop_token_ids", request.stop_tokens},
                       {"ignore_eos", true},
                       {"logprobs", 0},
                       {"return_token_ids", true}};
    auto reply = client_.PostJson("/v1/completions", body);
    const std::string where = "policy " + options_.url + "/v1/completions";
    if (!reply.ok()) return reply.status().Wrap(where);
    const Json& r = *reply;
    if (!r.contains("choices") || !r["choices"].is_array() || r["choices"].empty()) {
      return Status::InvalidArgument(where + ": the reply has no choices");
    }
    const Json& choice = r["choices"][0];
    if (!choice.contains("token_ids") || !choice["token_ids"].is_array()) {
      return Status::InvalidArgument(where + ": choices[0].token_ids is missing (the server must honour return_token_ids)");
    }
    const Json& ids = choice["token_ids"];
    const Json* logprobs = choice.contains("logprobs") && choice["logprobs"].is_object() &&
                                   choice["logprobs"].contains("token_logprobs")
                               ? &choice["logprobs"]["token_logprobs"]
                               : nullptr;
    if (logprobs == nullptr || !logprobs->is_array() || logprobs->size() != ids.size()) {
      return Status::InvalidArgument(where + ": choices[0].logprobs.token_logprobs is missing or not one per token");
    }
    const Json* versions = choice.contains("token_versions") && choice["token_versions"].is_array() &&
                                   choice["token_versions"].size() == ids.size()
                               ? &choice["token_versions"]
                               : nullptr;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (!ids[i].is_number_integer() || !(*logprobs)[i].is_number()) {
        return Status::InvalidArgument(where + ": token " + std::to_string(i) + " is not an id with a logprob");
      }
      on_token({ids[i].get<int32_t>(), (*logprobs)[i].get<float>(),
                versions ? (*versions)[i].get<int64_t>() : int64_t{0}});
    }
    return interrupted();
  }

 private:
  HttpClient client_;
  const OpenAiPolicyOptions options_;
};

// Each turn a Generate of the policy's own.
class TurnsSession : public PolicySession {
 public:
  explicit TurnsSession(Policy& policy) : policy_(policy) {}
  Result<bool> Generate(const PolicyRequest& request, const std::function<void(const PolicyToken&)>& on_token,
                        const std::function<bool()>& interrupted) override {
    return policy_.Generate(request, on_token, interrupted);
  }

 private:
  Policy& policy_;
};

}  // namespace

Result<std::unique_ptr<PolicySession>> Policy::OpenSession() {
  return std::unique_ptr<PolicySession>(std::make_unique<TurnsSession>(*this));
}

std::unique_ptr<Policy> EnginePolicy(engine::Engine& engine, bool sessions) {
  return std::make_unique<EnginePolicyImpl>(engine, sessions);
}

Result<std::unique_ptr<Policy>> OpenAiPolicy(const OpenAiPolicyOptions& options) {
  HttpClientOptions http;
  http.base_url = options.url;
  http.bearer_token = options.api_key;
  http.read_timeout = std::chrono::minutes(10);  // one whole turn, unstreamed
  FR_ASSIGN_OR_RETURN(HttpClient client, HttpClient::Create(http));
  return std::unique_ptr<Policy>(std::make_unique<OpenAiPolicyImpl>(std::move(client), options));
}

}  // namespace flashroll
