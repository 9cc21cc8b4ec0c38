// HttpClient (common/http.h) on top of cpp-httplib.
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <mutex>

#include "common/http.h"
#include "common/http_internal.h"

namespace flashroll {
namespace {

using http_internal::Lower;
using http_internal::LowerCaseHeaders;

// How much of an error reply GetStream keeps when streaming was refused.
constexpr size_t kMaxErrorBodyBytes = 64 * 1024;

// Applies the client options to one httplib client.
void Configure(httplib::Client& cli, const HttpClientOptions& options) {
  cli.set_connection_timeout(options.connect_timeout);
  cli.set_read_timeout(options.read_timeout);
  cli.set_write_timeout(options.write_timeout);
  if (!options.bearer_token.empty()) cli.set_bearer_token_auth(options.bearer_token);
  if (!options.ca_cert_file.empty()) cli.set_ca_cert_path(options.ca_cert_file);
}

Status TransportError(httplib::Error error, const std::string& what,
                      const HttpClientOptions& options,
                      std::chrono::steady_clock::duration elapsed) {
  switch (error) {
    case httplib::Error::ConnectionTimeout:
      return Status::DeadlineExceeded(what + ": connect timed out after " +
                                      std::to_string(options.connect_timeout.count()) + " ms");
    case httplib::Error::Read:
      // httplib reports a read timeout as a plain read error; a socket read
      // timeout cannot fire before read_timeout has passed.
      if (elapsed >= options.read_timeout) {
        return Status::DeadlineExceeded(what + ": no reply within the read timeout of " +
                                        std::to_string(options.read_timeout.count()) + " ms");
      }
      return Status::Unavailable(what + ": connection closed before the reply was complete");
    default:
      return Status::Unavailable(what + ": " + httplib::to_string(error));
  }
}

HttpResponse ToResponse(const httplib::Response& r) {
  HttpResponse out;
  out.status = r.status;
  out.body = r.body;
  out.headers = LowerCaseHeaders(r.headers);
  out.content_type = r.get_header_value("Content-Type");
  return out;
}

}  // namespace

// Idle keep-alive connections of one HttpClient and its copies.
class HttpConnectionPool {
 public:
  // An idle connection young enough that its server has not closed it
  // (servers time idle ones out after seconds), or nullptr.
  std::unique_ptr<httplib::Client> Take() {
    std::lock_guard<std::mutex> lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    std::erase_if(idle_, [now](const Idle& idle) { return now - idle.since >= kMaxIdleTime; });
    if (idle_.empty()) return nullptr;
    std::unique_ptr<httplib::Client> client = std::move(idle_.back().client);
    idle_.pop_back();
    return client;
  }

  // Keeps a connection after a complete exchange; beyond kMaxIdle it closes.
  void Give(std::unique_ptr<httplib::Client> client) {
    std::lock_guard<std::mutex> lock(mu_);
    if (idle_.size() < kMaxIdle) idle_.push_back({std::move(client), std::chrono::steady_clock::now()});
  }

 private:
  static constexpr size_t kMaxIdle = 4;
  static constexpr std::chrono::milliseconds kMaxIdleTime{1000};

  struct Idle {
    std::unique_ptr<httplib::Client> client;
    std::chrono::steady_clock::time_point since;
  };
  std::mutex mu_;
  std::vector<Idle> idle_;  // guarded by mu_
};

HttpClient::HttpClient(HttpClientOptions options, std::string origin, std::string prefix)
    : options_(std::move(options)),
      origin_(std::move(origin)),
      prefix_(std::move(prefix)),
      connections_(std::make_shared<HttpConnectionPool>()) {}

Result<HttpClient> HttpClient::Create(HttpClientOptions options) {
  const std::string& url = options.base_url;
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("base URL \"" + url + "\": " + why);
  };
  size_t sep = url.find("://");
  if (sep == std::string::npos) return bad("expected http://host[:port][/prefix]");
  std::string scheme = Lower(url.substr(0, sep));
  if (scheme != "http" && scheme != "https") return bad("scheme must be http or https");
  std::string rest = url.substr(sep + 3);
  size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  std::string prefix = slash == std::string::npos ? "" : rest.substr(slash);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  if (prefix.find_first_of("?#") != std::string::npos) return bad("no query or fragment allowed");

  std::string host;
  std::string port_text;
  if (!authority.empty() && authority[0] == '[') {
    size_t close = authority.find(']');
    if (close == std::string::npos) return bad("unterminated IPv6 address");
    host = authority.substr(0, close + 1);
    std::string after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return bad("junk after the IPv6 address");
      port_text = after.substr(1);
    }
  } else {
    size_t colon = authority.find(':');
    host = authority.substr(0, colon);
    if (colon != std::string::npos) port_text = authority.substr(colon + 1);
  }
  if (host.empty() || host.find_first_of("@?# \t") != std::string::npos) {
    return bad("missing or invalid host");
  }
  int port = scheme == "https" ? 443 : 80;
  if (!port_text.empty()) {
    if (port_text.size() > 5 || port_text.find_first_not_of("0123456789") != std::string::npos) {
      return bad("invalid port");
    }
    port = std::stoi(port_text);
    if (port < 1 || port > 65535) return bad("port out of range");
  }
  std::string origin = scheme + "://" + host + ":" + std::to_string(port);
  return HttpClient(std::move(options), std::move(origin), std::move(prefix));
}

Result<HttpResponse> HttpClient::Send(HttpMethod method, std::string_view path,
                                      std::string_view body, std::string_view content_type) const {
  if (path.empty() || path[0] != '/') {
    return Status::InvalidArgument("request path \"" + std::string(path) +
                                   "\" must start with '/'");
  }
  httplib::Request req;
  req.method = HttpMethodName(method);
  req.path = prefix_ + std::string(path);
  std::string what = req.method + " " + origin_ + req.path;
  if (!body.empty() || method == HttpMethod::kPost || method == HttpMethod::kPut ||
      method == HttpMethod::kPatch) {
    req.body.assign(body);
    req.set_header("Content-Type", std::string(content_type));
  }

  std::unique_ptr<httplib::Client> cli = connections_->Take();
  if (cli == nullptr) {
    cli = std::make_unique<httplib::Client>(origin_);
    Configure(*cli, options_);
    cli->set_keep_alive(true);
    // Headers and body go out in separate writes: without this, Nagle holds
    // the body for the server's delayed ACK (~40 ms) on a reused connection.
    cli->set_tcp_nodelay(true);
  }
  auto start = std::chrono::steady_clock::now();
  httplib::Result result = cli->send(req);
  if (!result) {  // the connection is dropped with `cli`
    return TransportError(result.error(), what, options_, std::chrono::steady_clock::now() - start);
  }
  HttpResponse response = ToResponse(result.value());
  connections_->Give(std::move(cli));
  return response;
}

Result<Json> HttpClient::SendJson(HttpMethod method, std::string_view path,
                                  const Json& body) const {
  std::string text = body.is_null() ? std::string() : DumpJson(body);
  FR_ASSIGN_OR_RETURN(HttpResponse reply, Send(method, path, text, "application/json"));
  FR_RETURN_IF_ERROR(StatusFromHttpReply(reply.status, reply.body));
  if (reply.body.empty()) return Json(nullptr);
  return ParseJson(reply.body,
                   std::string(HttpMethodName(method)) + " " + std::string(path) + " reply");
}

Status HttpClient::GetStream(std::string_view path,
                             const std::function<Status(std::string_view)>& on_chunk) const {
  if (path.empty() || path[0] != '/') {
    return Status::InvalidArgument("request path \"" + std::string(path) +
                                   "\" must start with '/'");
  }
  httplib::Request req;
  req.method = "GET";
  req.path = prefix_ + std::string(path);
  std::string what = "GET " + origin_ + req.path;

  int status = 0;
  std::string error_body;
  Status chunk_status;
  req.response_handler = [&](const httplib::Response& r) {
    status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (status < 200 || status >= 300) {
      if (error_body.size() < kMaxErrorBodyBytes) {
        error_body.append(data, std::min(n, kMaxErrorBodyBytes - error_body.size()));
      }
      return true;
    }
    chunk_status = on_chunk(std::string_view(data, n));
    return chunk_status.ok();
  };

  httplib::Client cli(origin_);
  Configure(cli, options_);
  auto start = std::chrono::steady_clock::now();
  httplib::Result result = cli.send(req);
  if (!chunk_status.ok()) return chunk_status;
  if (!result) {
    return TransportError(result.error(), what, options_, std::chrono::steady_clock::now() - start);
  }
  return StatusFromHttpReply(result->status, error_body);
}

}  // namespace flashroll
