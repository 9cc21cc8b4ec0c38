// HttpSandboxClient: SandboxService over the node agent's HTTP API
// (server.h), for the rest of the project to drive sandboxes on a
// `flashroll sandboxd`. Errors come back with the server's Status code and
// message (common/http.h), so callers handle a remote sandbox as a local
// one; transport failures are kUnavailable or kDeadlineExceeded.
//
// An exec waits for the command, so HttpClientOptions::read_timeout must
// exceed the longest exec timeout used (the default is 60 s); otherwise the
// call fails with kDeadlineExceeded while the command goes on.
//
// ExecStreaming asks the server for the streamed reply but, until
// HttpClient can stream a POST reply, receives it whole and then hands the
// output to the callback in the order it was produced.
//
// Thread safety: immutable after Create(); any number of threads may call
// it at once (each request uses its own connection).
#pragma once

#include <memory>
#include <string>

#include "common/http.h"
#include "sandbox/api/service.h"

namespace flashroll::sandbox::api {

class HttpSandboxClient final : public SandboxService {
 public:
  // `options.base_url` is the agent's "http://host:port". Returns
  // kInvalidArgument for a bad URL.
  static Result<std::unique_ptr<HttpSandboxClient>> Create(HttpClientOptions options);

  Result<std::string> Create(const SandboxSpec& spec, const std::string& client_key = "") override;
  Result<ExecResult> Exec(const std::string& id, const ExecCall& call) override;
  Result<ExecResult> ExecStreaming(const std::string& id, const ExecCall& call,
                                   const OutputCallback& on_output) override;
  Status Signal(const std::string& id, int signal) override;
  Status PutFile(const std::string& id, const std::string& path, std::string_view data,
                 mode_t mode = 0644) override;
  Result<std::string> GetFile(const std::string& id, const std::string& path) override;
  Status Freeze(const std::string& id) override;
  Status Thaw(const std::string& id) override;
  Status Destroy(const std::string& id) override;
  Result<EventPage> Events(const std::string& id, uint64_t cursor,
                           std::chrono::milliseconds wait = std::chrono::milliseconds(0)) override;

  // The Prometheus text of GET /metrics.
  Result<std::string> Metrics();

 private:
  explicit HttpSandboxClient(HttpClient http) : http_(std::move(http)) {}

  HttpClient http_;
};

// Percent-encodes `text` for a path segment or query value.
std::string UrlEncode(std::string_view text);

}  // namespace flashroll::sandbox::api
