#include "sandbox/api/client.h"

#include <cctype>
#include <cstdio>

namespace flashroll::sandbox::api {

namespace {

std::string SandboxPath(const std::string& id) { return "/v1/sandboxes/" + UrlEncode(id); }

// The body of a 2xx raw reply, or the reply's Status.
Result<std::string> RawBody(Result<HttpResponse> reply) {
  FR_RETURN_IF_ERROR(reply.status());
  FR_RETURN_IF_ERROR(StatusFromHttpReply(reply->status, reply->body));
  return std::move(reply->body);
}

}  // namespace

std::string UrlEncode(std::string_view text) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

Result<std::unique_ptr<HttpSandboxClient>> HttpSandboxClient::Create(HttpClientOptions options) {
  FR_ASSIGN_OR_RETURN(HttpClient http, HttpClient::Create(std::move(options)));
  return std::unique_ptr<HttpSandboxClient>(new HttpSandboxClient(std::move(http)));
}

Result<std::string> HttpSandboxClient::Create(const SandboxSpec& spec, const std::string& client_key) {
  Result<Json> reply = Status::Internal("unset");
  if (client_key.empty()) {
    reply = http_.PostJson("/v1/sandboxes", SpecToJson(spec));
  } else {
    // The idempotency key travels as a header, which SendJson cannot set;
    // the query form is the same key to the server.
    reply = http_.PostJson("/v1/sandboxes?client_key=" + UrlEncode(client_key), SpecToJson(spec));
  }
  FR_RETURN_IF_ERROR(reply.status());
  return JsonView(*reply, "reply").GetString("id");
}

Result<ExecResult> HttpSandboxClient::Exec(const std::string& id, const ExecCall& call) {
  FR_ASSIGN_OR_RETURN(Json reply, http_.PostJson(SandboxPath(id) + "/exec", ExecCallToJson(call)));
  return ExecResultFromJson(JsonView(reply, "reply"));
}

Result<ExecResult> HttpSandboxClient::ExecStreaming(const std::string& id, const ExecCall& call,
                                                    const OutputCallback& on_output) {
  FR_ASSIGN_OR_RETURN(std::string body,
                      RawBody(http_.Post(SandboxPath(id) + "/exec/stream", DumpJson(ExecCallToJson(call)),
                                         "application/json")));
  size_t start = 0;
  size_t line_no = 0;
  while (start < body.size()) {
    size_t end = body.find('\n', start);
    if (end == std::string::npos) end = body.size();
    const std::string what = "exec stream line " + std::to_string(++line_no);
    FR_ASSIGN_OR_RETURN(Json line, ParseJson(std::string_view(body).substr(start, end - start), what));
    JsonView view(line, what);
    if (view.Has("result")) {
      FR_ASSIGN_OR_RETURN(JsonView result, view.Get("result"));
      return ExecResultFromJson(result);
    }
    if (view.Has("error")) return StatusFromHttpReply(500, DumpJson(line));
    FR_ASSIGN_OR_RETURN(std::string stream, view.GetString("stream"));
    FR_ASSIGN_OR_RETURN(std::string data, view.GetString("data"));
    on_output(stream == "stderr" ? OutputStream::kStderr : OutputStream::kStdout, data);
    start = end + 1;
  }
  return Status::Unavailable("exec stream of sandbox " + id + " ended without a result");
}

Status HttpSandboxClient::Signal(const std::string& id, int signal) {
  return http_.PostJson(SandboxPath(id) + "/signal", SignalToJson(signal)).status();
}

Status HttpSandboxClient::PutFile(const std::string& id, const std::string& path, std::string_view data,
                                  mode_t mode) {
  char mode_text[16];
  std::snprintf(mode_text, sizeof(mode_text), "%o", static_cast<unsigned>(mode));
  return RawBody(http_.Put(SandboxPath(id) + "/files?path=" + UrlEncode(path) + "&mode=" + mode_text, data,
                           "application/octet-stream"))
      .status();
}

Result<std::string> HttpSandboxClient::GetFile(const std::string& id, const std::string& path) {
  return RawBody(http_.Get(SandboxPath(id) + "/files?path=" + UrlEncode(path)));
}

Status HttpSandboxClient::Freeze(const std::string& id) {
  return http_.PostJson(SandboxPath(id) + "/freeze", nullptr).status();
}

Status HttpSandboxClient::Thaw(const std::string& id) {
  return http_.PostJson(SandboxPath(id) + "/thaw", nullptr).status();
}

Status HttpSandboxClient::Destroy(const std::string& id) { return http_.DeleteJson(SandboxPath(id)).status(); }

Result<EventPage> HttpSandboxClient::Events(const std::string& id, uint64_t cursor,
                                            std::chrono::milliseconds wait) {
  std::string path = SandboxPath(id) + "/events?cursor=" + std::to_string(cursor);
  if (wait.count() > 0) path += "&wait_ms=" + std::to_string(wait.count());
  FR_ASSIGN_OR_RETURN(Json reply, http_.GetJson(path));
  return EventPageFromJson(JsonView(reply, "reply"), id);
}

Result<std::string> HttpSandboxClient::Metrics() { return RawBody(http_.Get("/metrics")); }

}  // namespace flashroll::sandbox::api
