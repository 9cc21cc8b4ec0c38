// SessionRoutes: /v1/sessions over Engine sessions (engine.h
// OpenSession...), the routes openai_server.h lists. A session's id is 128
// random bits as 32 hex digits; only the client (clients.h) that made it
// sees it, others get 404 as for an id that never was. Its engine sequence
// is that client's too on /v1/sequences.
//
// Thread safety: handlers run concurrently on the HTTP server's workers;
// the table of sessions is guarded by a mutex, the engine is thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "common/http.h"
#include "engine/server/clients.h"
#include "engine/server/server_metrics.h"
#include "engine/serving/engine.h"
#include "engine/tokenizer/tokenizer.h"

namespace flashroll::engine {

class SessionRoutes {
 public:
  // Everything given must outlive the routes.
  SessionRoutes(Engine* engine, const Tokenizer* tokenizer, const ApiKeys* keys, Owners* owners,
                ServerMetrics* metrics, std::string model_name, int64_t default_max_tokens)
      : engine_(engine), tokenizer_(tokenizer), keys_(keys), owners_(owners), metrics_(metrics),
        model_name_(std::move(model_name)), default_max_tokens_(default_max_tokens) {}
  ~SessionRoutes();  // closes every session left open
  SessionRoutes(const SessionRoutes&) = delete;
  SessionRoutes& operator=(const SessionRoutes&) = delete;

  void AddTo(HttpServer& http);

 private:
  struct Open {
    uint64_t engine_id = 0;
    int client = 0;
  };
  enum class Action { kCreate, kGet, kAppend, kGenerate, kPause, kDelete };
  HttpResponse Serve(const HttpRequest& request, Action action);
  // The session named by the path's id if it is `client`'s.
  std::optional<Open> Find(const HttpRequest& request, int client);
  HttpResponse Generate(const HttpRequest& request, uint64_t engine_id);

  Engine* engine_;
  const Tokenizer* tokenizer_;
  const ApiKeys* keys_;
  Owners* owners_;
  ServerMetrics* metrics_;
  const std::string model_name_;
  const int64_t default_max_tokens_;
  std::mutex mu_;
  std::unordered_map<std::string, Open> sessions_;  // by public id
};

}  // namespace flashroll::engine
