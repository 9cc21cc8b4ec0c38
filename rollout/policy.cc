#include "rollout/policy.h"

#include <algorithm>
#include <chrono>

#include "common/http.h"

namespace flashroll {
namespace {

class EnginePolicyImpl : public Policy {
 public:
  explicit EnginePolicyImpl(engine::Engine& engine) : engine_(engine) {}
  int64_t max_model_len() const override { return engine_.max_model_len(); }

  Result<bool> Generate(const PolicyRequest& request, const std::function<void(const PolicyToken&)>& on_token,
                        const std::function<bool()>& interrupted) override {
    engine::GenerationRequest r;
    r.prompt = request.prompt;
    r.max_tokens = request.max_tokens;
    r.stop_tokens = request.stop_tokens;
    r.ignore_eos = true;  // the stop tokens decide
    r.sampling.temperature = request.temperature;
    r.sampling.seed = request.seed;
    FR_ASSIGN_OR_RETURN(std::shared_ptr<engine::RequestStream> stream, engine_.Submit(std::move(r)));
    // Polled, so an interruption ends the request between tokens.
    while (true) {
      bool timed_out = false;
      auto event = stream->Next(std::chrono::milliseconds(20), &timed_out);
      if (!event) {
        if (!timed_out) return false;
      } else {
        if (event->finish == engine::FinishReason::kAbort) return Status::Unavailable("the engine stopped");
        if (event->has_token) on_token({event->token.token, event->token.logprob, event->version});
      }
      if (interrupted()) {
        stream->Cancel();
        return true;
      }
    }
  }

 private:
  engine::Engine& engine_;
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

}  // namespace

std::unique_ptr<Policy> EnginePolicy(engine::Engine& engine) { return std::make_unique<EnginePolicyImpl>(engine); }

Result<std::unique_ptr<Policy>> OpenAiPolicy(const OpenAiPolicyOptions& options) {
  HttpClientOptions http;
  http.base_url = options.url;
  http.bearer_token = options.api_key;
  http.read_timeout = std::chrono::minutes(10);  // one whole turn, unstreamed
  FR_ASSIGN_OR_RETURN(HttpClient client, HttpClient::Create(http));
  return std::unique_ptr<Policy>(std::make_unique<OpenAiPolicyImpl>(std::move(client), options));
}

}  // namespace flashroll
