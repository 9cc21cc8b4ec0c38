#include "engine/server/session_routes.h"

#include <chrono>
#include <cstdio>
#include <random>

#include "engine/server/openai_request.h"
#include "engine/server/openai_response.h"

namespace flashroll::engine {
namespace {

constexpr char kSessionsPath[] = "/v1/sessions";  // the metrics' label for every session route

using Clock = std::chrono::steady_clock;

HttpResponse Reply(int status, const Json& body) {
  HttpResponse r;
  r.status = status;
  r.content_type = "application/json";
  r.body = DumpJson(body);
  return r;
}

// 128 random bits as 32 hex digits.
std::string NewSessionId() {
  std::random_device random;
  std::string id;
  for (int i = 0; i < 4; ++i) {
    char part[9];
    std::snprintf(part, sizeof(part), "%08x", static_cast<unsigned>(random()));
    id += part;
  }
  return id;
}

ApiError NoSuchSession(const std::string& id) {
  ApiError e;
  e.http_status = 404;
  e.code = "session_not_found";
  e.message = "no session \"" + id + "\"";
  return e;
}

// NotFound (closed meanwhile) and FailedPrecondition (a turn runs) as the
// session routes name them; the rest as every route does.
ApiError SessionError(const Status& status, const std::string& id) {
  if (status.code() == Code::kNotFound) return NoSuchSession(id);
  ApiError e = ApiErrorFromStatus(status);
  if (status.code() == Code::kFailedPrecondition) e.code = "session_state_conflict";
  return e;
}

Json SessionJson(const std::string& id, const SequenceInfo& info) {
  return {{"id", id},
          {"object", "session"},
          {"state", info.state},
          {"tokens", info.tokens},
          {"kv_blocks", info.kv_blocks},
          {"on_disk", info.on_disk},
          {"prefill_tokens", info.prefill_tokens},
          {"reprefill_tokens", info.reprefill_tokens}};
}

}  // namespace

SessionRoutes::~SessionRoutes() {
  for (const auto& [id, open] : sessions_) {
    owners_->Forget(open.engine_id);
    (void)engine_->CloseSession(open.engine_id);
  }
}

void SessionRoutes::AddTo(HttpServer& http) {
  auto route = [&](HttpMethod method, const char* pattern, Action action) {
    http.HandleRaw(method, pattern,
                   [this, action](const HttpRequest& r) -> Result<HttpResponse> { return Serve(r, action); });
  };
  route(HttpMethod::kPost, "/v1/sessions", Action::kCreate);
  route(HttpMethod::kGet, "/v1/sessions/:id", Action::kGet);
  route(HttpMethod::kPost, "/v1/sessions/:id/append", Action::kAppend);
  route(HttpMethod::kPost, "/v1/sessions/:id/generate", Action::kGenerate);
  route(HttpMethod::kPost, "/v1/sessions/:id/pause", Action::kPause);
  route(HttpMethod::kDelete, "/v1/sessions/:id", Action::kDelete);
}

std::optional<SessionRoutes::Open> SessionRoutes::Find(const HttpRequest& request, int client) {
  auto it = request.path_params.find("id");
  if (it == request.path_params.end()) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  auto found = sessions_.find(it->second);
  if (found == sessions_.end() || found->second.client != client) return std::nullopt;
  return found->second;
}

HttpResponse SessionRoutes::Serve(const HttpRequest& request, Action action) {
  const Clock::time_point arrived = Clock::now();
  auto answer = [&](int status, const Json& body) {
    metrics_->ObserveRequest(kSessionsPath, status, std::chrono::duration<double>(Clock::now() - arrived).count());
    return Reply(status, body);
  };
  auto fail = [&](const ApiError& e) { return answer(e.http_status, e.ToJson()); };
  int client = 0;
  if (auto e = keys_->Identify(request, &client)) return fail(*e);
  if (action == Action::kCreate) {
    Result<uint64_t> opened = engine_->OpenSession();
    if (!opened.ok()) return fail(ApiErrorFromStatus(opened.status()));
    const std::string id = NewSessionId();
    {
      std::lock_guard<std::mutex> lock(mu_);
      sessions_[id] = {*opened, client};
    }
    owners_->Claim(*opened, client);
    SequenceInfo empty;
    empty.state = "paused";
    return answer(200, SessionJson(id, empty));
  }
  const std::string id = request.path_params.count("id") ? request.path_params.at("id") : std::string();
  std::optional<Open> open = Find(request, client);
  if (!open) return fail(NoSuchSession(id));
  Json body = Json::object();
  if (action != Action::kGet && action != Action::kDelete && !request.body.empty()) {
    if (auto e = ParseJsonBody(request.body, &body)) return fail(*e);
  }
  Status done = Status::Ok();
  switch (action) {
    case Action::kDelete: {
      done = engine_->CloseSession(open->engine_id);
      {
        std::lock_guard<std::mutex> lock(mu_);
        sessions_.erase(id);
      }
      owners_->Forget(open->engine_id);
      if (!done.ok() && done.code() != Code::kNotFound) return fail(SessionError(done, id));
      return answer(200, Json{{"id", id}, {"object", "session"}, {"deleted", true}});
    }
    case Action::kAppend: {
      SessionAppendRequest append;
      if (auto e = ReadSessionAppendRequest(body, &append)) return fail(*e);
      // Text from outside is plain text: no markup becomes a control token.
      if (!append.is_tokens) tokenizer_->EncodeAppend(append.text, /*parse_special=*/false, &append.token_ids);
      done = engine_->AppendToSession(open->engine_id, std::move(append.token_ids));
      break;
    }
    case Action::kGenerate:
      return Generate(request, open->engine_id);
    case Action::kPause: {
      SessionPauseRequest pause;
      if (auto e = ReadSessionPauseRequest(body, &pause)) return fail(*e);
      done = engine_->PauseSession(open->engine_id, {.to_disk = pause.to_disk});
      break;
    }
    case Action::kGet:
    case Action::kCreate:
      break;
  }
  if (!done.ok()) return fail(SessionError(done, id));
  Result<SequenceInfo> info = engine_->GetSession(open->engine_id);
  if (!info.ok()) return fail(SessionError(info.status(), id));
  return answer(200, SessionJson(id, *info));
}

HttpResponse SessionRoutes::Generate(const HttpRequest& request, uint64_t engine_id) {
  const Clock::time_point arrived = Clock::now();
  const std::string id = request.path_params.at("id");
  auto answer = [&](int status, const Json& body) {
    metrics_->ObserveRequest(kSessionsPath, status, std::chrono::duration<double>(Clock::now() - arrived).count());
    return Reply(status, body);
  };
  auto fail = [&](const ApiError& e) { return answer(e.http_status, e.ToJson()); };
  Json body;
  if (auto e = ParseJsonBody(request.body, &body)) return fail(*e);
  GenerationParams p;
  if (auto e = ReadSessionGenerateRequest(body, &p)) return fail(*e);
  if (p.model != model_name_) {
    ApiError e;
    e.http_status = 404;
    e.param = "model";
    e.code = "model_not_found";
    e.message = "The model `" + p.model + "` does not exist; this server serves `" + model_name_ + "`.";
    return fail(e);
  }
  GenerationRequest turn;
  turn.sampling = p.sampling;
  turn.max_tokens = p.max_tokens.value_or(default_max_tokens_);
  turn.stop_tokens = p.stop_token_ids;
  turn.stop_strings = p.stop;
  turn.ignore_eos = p.ignore_eos;
  Result<std::shared_ptr<RequestStream>> stream = engine_->GenerateInSession(engine_id, std::move(turn));
  if (!stream.ok()) return fail(SessionError(stream.status(), id));
  const Choice c = (*stream)->Collect()[0];
  if (c.finish == FinishReason::kAbort) {
    ApiError e;
    e.http_status = 500;
    e.type = "server_error";
    e.message = c.error.empty() ? "the turn was aborted" : c.error;
    return fail(e);
  }
  Json logprobs = Json::array(), versions = Json::array();
  for (const SampledToken& t : c.samples) logprobs.push_back(FloatJson(t.logprob));
  for (int64_t v : c.versions) versions.push_back(v);
  Result<SequenceInfo> info = engine_->GetSession(engine_id);
  const int64_t tokens = info.ok() ? info->tokens : 0;
  return answer(200, Json{{"id", id},
                          {"object", "session.generation"},
                          {"token_ids", c.tokens},
                          {"text", tokenizer_->Decode(c.tokens)},
                          {"logprobs", logprobs},
                          {"token_versions", versions},
                          {"finish_reason", FinishReasonName(c.finish)},
                          {"usage",
                           {{"prompt_tokens", tokens - static_cast<int64_t>(c.tokens.size())},
                            {"completion_tokens", c.tokens.size()},
                            {"prefill_tokens", c.prefill_tokens},
                            {"reprefill_tokens", c.reprefill_tokens}}}});
}

}  // namespace flashroll::engine
