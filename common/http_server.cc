// HttpServer (common/http.h) on top of cpp-httplib.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <httplib.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <exception>
#include <thread>
#include <type_traits>

#include "common/http.h"
#include "common/http_connection.h"
#include "common/http_internal.h"
#include "common/log.h"
#include "common/strings.h"

namespace flashroll {
namespace {

using http_internal::CurrentConnection;
using http_internal::Lower;
using http_internal::LowerCaseHeaders;
using http_internal::ServedConnection;

// Requests served on one connection before it is closed.
constexpr size_t kKeepAliveMaxCount = 1000;
// How long a connection closed with its request's body unread is read and
// discarded first: closing with unread bytes resets the connection, and the
// client, still sending, would lose the reply.
constexpr std::chrono::milliseconds kLingerTime{1000};

// Serves one accepted connection: the socket, the server's TLS context
// (null for plain HTTP) and httplib's request processing for one request.
using RequestProcessor = std::function<bool(httplib::Stream&, bool close_connection, bool& connection_closed)>;
using ConnectionServer = std::function<bool(int fd, SSL_CTX* tls, const RequestProcessor& process)>;

// cpp-httplib's server (plain or TLS) with its per-connection loop replaced
// by `serve`: the loop that reads with phase deadlines
// (common/http_connection.h). The request parsing and routing stay
// httplib's; after the headers, the body phase begins.
template <typename Base>
class GuardedServer final : public Base {
 public:
  template <typename... Args>
  explicit GuardedServer(ConnectionServer serve, Args&&... args)
      : Base(std::forward<Args>(args)...), serve_(std::move(serve)) {}

 private:
  bool process_and_close_socket(socket_t sock) override {
    SSL_CTX* tls = nullptr;
    if constexpr (std::is_same_v<Base, httplib::SSLServer>) tls = this->ssl_context();
    const bool ok = serve_(sock, tls, [this](httplib::Stream& stream, bool close, bool& closed) {
      return this->process_request(stream, close, closed, [](httplib::Request&) {
        if (ServedConnection* connection = CurrentConnection()) connection->BeginBody();
      });
    });
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return ok;
  }

  const ConnectionServer serve_;
};

// Whether a request announces a body (which a refusal leaves unread).
bool HasBody(const httplib::Request& req) {
  const std::string length = req.get_header_value("Content-Length");
  return (!length.empty() && length != "0") || req.has_header("Transfer-Encoding");
}

// The reply is the connection's last (its request's body stays unread).
void CloseAfter(httplib::Response& res) {
  res.set_header("Connection", "close");
  if (ServedConnection* connection = CurrentConnection()) connection->CloseAfterReply();
}

// Compares in a time that does not depend on where the first difference is,
// so a token cannot be guessed byte by byte from response times.
bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  unsigned diff = a.size() == b.size() ? 0 : 1;
  size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned>(x ^ y);
  }
  return diff == 0;
}

// Mirrors cpp-httplib 0.11's can_compress_content_type: the types it gzips
// when the client accepts gzip.
bool CompressedByHttplib(const std::string& content_type) {
  if (content_type.rfind("text/", 0) == 0) return content_type != "text/event-stream";
  return content_type == "image/svg+xml" || content_type == "application/javascript" ||
         content_type == "application/json" || content_type == "application/xml" ||
         content_type == "application/protobuf" || content_type == "application/xhtml+xml";
}

bool ValidParamName(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

// Turns "/v1/sandboxes/:id/files/*path" into the regex
// "/v1/sandboxes/([^/]+)/files/(.+)" and the names {"id", "path"}.
Status CompilePattern(std::string_view pattern, std::string* regex,
                      std::vector<std::string>* names) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("route pattern \"" + std::string(pattern) + "\": " + why);
  };
  if (pattern.empty() || pattern[0] != '/') return bad("must start with '/'");
  regex->clear();
  names->clear();
  size_t pos = 1;
  bool done = false;
  while (true) {
    size_t slash = pattern.find('/', pos);
    std::string_view segment =
        pattern.substr(pos, slash == std::string_view::npos ? std::string_view::npos : slash - pos);
    if (done) return bad("\"*name\" must be the last segment");
    *regex += '/';
    if (!segment.empty() && (segment[0] == ':' || segment[0] == '*')) {
      std::string name(segment.substr(1));
      if (!ValidParamName(name)) return bad("parameter names are letters, digits and '_'");
      if (std::find(names->begin(), names->end(), name) != names->end()) {
        return bad("parameter \"" + name + "\" appears twice");
      }
      names->push_back(name);
      *regex += segment[0] == ':' ? "([^/]+)" : "(.+)";
      done = segment[0] == '*';
    } else {
      for (char c : segment) {
        if (std::string_view(".^$|()[]{}*+?\\").find(c) != std::string_view::npos) *regex += '\\';
        *regex += c;
      }
    }
    if (slash == std::string_view::npos) break;
    pos = slash + 1;
  }
  return Status::Ok();
}

void WriteError(httplib::Response& res, const Status& status, int http_status = 0) {
  res.status = http_status != 0 ? http_status : HttpStatusFromCode(status.code());
  if (status.code() == Code::kUnauthenticated) res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(DumpJson(ErrorJson(status)), "application/json");
}

// Runs a handler; a handler that throws becomes a 500 rather than a dropped
// connection.
template <typename Fn>
auto CallHandler(const Fn& fn, const HttpRequest& request) -> decltype(fn(request)) {
  try {
    return fn(request);
  } catch (const std::exception& e) {
    return Status::Internal(std::string("handler threw: ") + e.what());
  } catch (...) {
    return Status::Internal("handler threw a non-standard exception");
  }
}

class SinkWriter final : public ChunkWriter {
 public:
  SinkWriter(httplib::DataSink& sink, const std::atomic<bool>& stopping)
      : sink_(sink), stopping_(stopping) {}
  bool Write(std::string_view data) override {
    // Refusing writes once the server stops lets endless streams end, so
    // that Stop() does not wait for them forever.
    if (stopping_.load()) ok_ = false;
    // An empty write would end httplib's chunk loop early.
    if (data.empty() || !ok_) return ok_;
    ok_ = sink_.write(data.data(), data.size());
    return ok_;
  }

 private:
  httplib::DataSink& sink_;
  const std::atomic<bool>& stopping_;
  bool ok_ = true;
};

// Set on the threads of RefusingTaskQueue's refusal pool while they serve a
// connection that found every worker busy.
thread_local bool t_refusing_connection = false;

// httplib's task queue with refuse_when_busy: a connection goes to a free
// worker, or, when all hold one, to a two-thread pool whose requests the
// pre-routing handler answers 429. Only httplib's accept thread enqueues.
class RefusingTaskQueue final : public httplib::TaskQueue {
 public:
  explicit RefusingTaskQueue(size_t workers) : limit_(workers), workers_(workers), refusers_(2) {}

  void enqueue(std::function<void()> fn) override {
    if (busy_.load() < limit_) {
      busy_.fetch_add(1);
      workers_.enqueue([this, fn = std::move(fn)] {
        fn();
        busy_.fetch_sub(1);
      });
      return;
    }
    refusers_.enqueue([fn = std::move(fn)] {
      t_refusing_connection = true;
      fn();
      t_refusing_connection = false;
    });
  }

  void shutdown() override {
    workers_.shutdown();
    refusers_.shutdown();
  }

 private:
  const size_t limit_;
  std::atomic<size_t> busy_{0};
  httplib::ThreadPool workers_;
  httplib::ThreadPool refusers_;
};

struct Route {
  HttpMethod method = HttpMethod::kGet;
  std::string pattern;  // as registered, for messages
  std::string scope;    // empty: any authenticated client
  bool open = false;    // no token needed (HandlePublicJson)
  JsonHandler json;
  RawHandler raw;
  StreamHandler stream;
  int success_status = 200;
  std::vector<std::string> params;
};

// A token the server accepts; the legacy single bearer_token holds every
// scope.
struct Credential {
  HttpCredential credential;
  bool every_scope = false;

  bool Holds(const std::string& scope) const {
    return every_scope || std::find(credential.scopes.begin(), credential.scopes.end(), scope) !=
                              credential.scopes.end();
  }
};

// OpenSSL's queued errors as one line (and the queue emptied).
std::string OpenSslErrors() {
  std::string out;
  while (const unsigned long error = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(error, text, sizeof(text));
    out += (out.empty() ? "" : "; ") + std::string(text);
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

// Configures a server context from PEM files; on failure *error names the
// file and OpenSSL's reason.
bool SetUpTls(SSL_CTX& ctx, const std::string& cert_file, const std::string& key_file, Status* error) {
  // TLS 1.0 and 1.1 are deprecated (RFC 8996). Debian's openssl.cnf says
  // so too, but a server should not depend on the system's config.
  SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION);
  if (SSL_CTX_use_certificate_chain_file(&ctx, cert_file.c_str()) != 1) {
    *error = Status::InvalidArgument("TLS certificate " + cert_file + ": " + OpenSslErrors());
    return false;
  }
  // Also checks that the key is the certificate's ("key values mismatch").
  if (SSL_CTX_use_PrivateKey_file(&ctx, key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    *error = Status::InvalidArgument("TLS key " + key_file + ": " + OpenSslErrors());
    return false;
  }
  return true;
}

}  // namespace

struct HttpServer::Impl {
  explicit Impl(HttpServerOptions o)
      : options(std::move(o)), gate(options.max_unauthenticated_per_peer, options.max_unauthenticated) {
    ConnectionServer serve = [this](int fd, SSL_CTX* tls_context, const RequestProcessor& process) {
      return ServeConnection(fd, tls_context, process);
    };
    if (!options.bearer_token.empty()) {
      credentials.push_back({HttpCredential{"default", options.bearer_token, {}}, /*every_scope=*/true});
    }
    for (const HttpCredential& c : options.credentials) credentials.push_back({c, false});
    tls = !options.tls_cert_file.empty() || !options.tls_key_file.empty();
    if (!tls) {
      server = std::make_unique<GuardedServer<httplib::Server>>(serve);
    } else if (options.tls_cert_file.empty() || options.tls_key_file.empty()) {
      tls_error = Status::InvalidArgument("TLS needs both a certificate and a key file");
      server = std::make_unique<httplib::Server>();  // never started
    } else {
      std::function<bool(SSL_CTX&)> set_up = [this](SSL_CTX& ctx) {
        return SetUpTls(ctx, options.tls_cert_file, options.tls_key_file, &tls_error);
      };
      server = std::make_unique<GuardedServer<httplib::SSLServer>>(serve, set_up);
      if (!server->is_valid() && tls_error.ok()) {
        tls_error = Status::Internal("TLS context: " + OpenSslErrors());
      }
    }
  }

  enum class State { kNew, kRunning, kStopped };

  void Add(HttpMethod method, std::string_view pattern, std::unique_ptr<Route> route);
  // One accepted connection, request after request (GuardedServer): the
  // unauthenticated-connection gate, the TLS handshake, the phase deadlines.
  bool ServeConnection(int fd, SSL_CTX* tls_context, const RequestProcessor& process);
  // cpp-httplib's pre-routing handler, run on the headers alone: the busy
  // pool's 429, then the token (401 before any body is read).
  httplib::Server::HandlerResponse PreRoute(const httplib::Request& req, httplib::Response& res) const;
  // The credential the request's bearer token names: nullptr on a server
  // without authentication; kUnauthenticated for a missing or unknown token.
  Result<const Credential*> Authenticate(const httplib::Request& req) const;
  // Authenticate, then the route's scope: kPermissionDenied naming it.
  Result<const Credential*> Authorize(const Route& route, const httplib::Request& req) const;
  // Reads the whole body through `reader` into *body. Over the limit it keeps
  // reading but discards, so the connection stays in step; *too_large says so.
  Status ReadBody(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader,
                  size_t limit, std::string* body, bool* too_large) const;
  void Serve(const Route& route, const httplib::Request& req, httplib::Response& res,
             const httplib::ContentReader* reader) const;
  void ServeStream(StreamResponse reply, const httplib::Request& req, httplib::Response& res) const;
  // cpp-httplib's error handler: gives every >= 400 reply without a body an
  // ErrorJson body.
  httplib::Server::HandlerResponse FillErrorReply(const httplib::Request& req,
                                                  httplib::Response& res) const;
  Status BodyTooLarge(size_t limit) const {
    return Status::ResourceExhausted("request body exceeds the limit of " + std::to_string(limit) + " bytes");
  }

  const HttpServerOptions options;
  std::vector<Credential> credentials;  // constant after construction
  std::vector<std::string> public_paths;  // set before Start()
  mutable http_internal::PeerGate gate;
  http_internal::ConnectionLimits limits;  // set by Start()
  bool tls = false;
  Status tls_error;                            // certificate or key files that did not load
  std::vector<std::unique_ptr<Route>> routes;  // stable addresses: captured by the handlers
  Status setup_error;                          // the first bad route pattern
  std::unique_ptr<httplib::Server> server;     // an httplib::SSLServer with TLS
  std::thread thread;
  std::atomic<bool> listen_returned{false};
  std::atomic<bool> stopping{false};
  State state = State::kNew;
  int port = 0;
};

void HttpServer::Impl::Add(HttpMethod method, std::string_view pattern,
                           std::unique_ptr<Route> route) {
  std::string regex;
  Status status = CompilePattern(pattern, &regex, &route->params);
  if (!status.ok()) {
    if (setup_error.ok()) setup_error = status;
    return;
  }
  route->method = method;
  route->pattern = std::string(pattern);
  const Route* r = route.get();
  routes.push_back(std::move(route));
  httplib::Server::Handler plain = [this, r](const httplib::Request& req, httplib::Response& res) {
    Serve(*r, req, res, nullptr);
  };
  // Methods with a body take a content reader so that the body size limit
  // also holds for chunked and compressed bodies (httplib checks only
  // Content-Length) and a rejected body can be drained.
  httplib::Server::HandlerWithContentReader with_reader =
      [this, r](const httplib::Request& req, httplib::Response& res,
                const httplib::ContentReader& reader) { Serve(*r, req, res, &reader); };
  switch (method) {
    case HttpMethod::kGet:
      server->Get(regex, plain);
      break;
    case HttpMethod::kPost:
      server->Post(regex, with_reader);
      break;
    case HttpMethod::kPut:
      server->Put(regex, with_reader);
      break;
    case HttpMethod::kPatch:
      server->Patch(regex, with_reader);
      break;
    case HttpMethod::kDelete:
      server->Delete(regex, with_reader);
      break;
  }
}

Result<const Credential*> HttpServer::Impl::Authenticate(const httplib::Request& req) const {
  if (credentials.empty()) return static_cast<const Credential*>(nullptr);
  std::string header = req.get_header_value("Authorization");
  if (header.empty()) {
    return Status::Unauthenticated("missing bearer token (send \"Authorization: Bearer <token>\")");
  }
  if (header.size() < 7 || Lower(header.substr(0, 7)) != "bearer ") {
    return Status::Unauthenticated("the Authorization header is not a bearer token");
  }
  const std::string_view given = TrimWhitespace(std::string_view(header).substr(7));
  // Every token is compared, so the time taken says nothing about which
  // one (or which prefix) matched.
  const Credential* match = nullptr;
  for (const Credential& c : credentials) {
    if (ConstantTimeEquals(given, c.credential.token)) match = &c;
  }
  if (match == nullptr) return Status::Unauthenticated("invalid bearer token");
  return match;
}

Result<const Credential*> HttpServer::Impl::Authorize(const Route& route, const httplib::Request& req) const {
  FR_ASSIGN_OR_RETURN(const Credential* credential, Authenticate(req));
  if (credential != nullptr && !route.scope.empty() && !credential->Holds(route.scope)) {
    return Status::PermissionDenied("token \"" + credential->credential.name + "\" lacks the scope \"" +
                                    route.scope + "\" that " + HttpMethodName(route.method) + " " +
                                    route.pattern + " needs");
  }
  return credential;
}

bool HttpServer::Impl::ServeConnection(int fd, SSL_CTX* tls_context, const RequestProcessor& process) {
  const std::string peer = http_internal::PeerAddress(fd);
  if (!gate.Admit(peer)) {
    log::Warn("http connection refused: too many connections without a valid token",
              {{"server", options.name}, {"peer", peer}});
    if (tls_context == nullptr) {
      const std::string body = DumpJson(ErrorJson(Status::ResourceExhausted(
          "too many connections from " + peer + " without a valid token; retry later")));
      const std::string reply = "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
                                "Content-Length: " + std::to_string(body.size()) +
                                "\r\nConnection: close\r\nRetry-After: 1\r\n\r\n" + body;
      // One attempt, never waiting: the worker goes back at once.
      [[maybe_unused]] const ssize_t sent = ::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    return false;
  }
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(tls_context != nullptr ? SSL_new(tls_context) : nullptr, &SSL_free);
  if (tls_context != nullptr && ssl == nullptr) {
    gate.Release(peer);
    return false;
  }
  ServedConnection connection(fd, ssl.get(), limits);
  connection.HoldPeerSlot(&gate, peer);
  http_internal::CurrentConnectionScope current(&connection);
  bool ok = ssl == nullptr || connection.Handshake();
  const auto stopping_now = [this] { return stopping.load(); };
  for (size_t served = 0; ok && served < kKeepAliveMaxCount; ++served) {
    if (!connection.AwaitRequest(served == 0, stopping_now)) break;
    bool closed = false;
    ok = process(connection, served + 1 == kKeepAliveMaxCount, closed);
    if (closed || connection.close_after_reply()) break;
  }
  if (ssl != nullptr && ok) SSL_shutdown(ssl.get());
  if (connection.close_after_reply()) connection.DrainBeforeClose(kLingerTime);
  return ok;
}

httplib::Server::HandlerResponse HttpServer::Impl::PreRoute(const httplib::Request& req,
                                                            httplib::Response& res) const {
  const auto listed = [&](const std::vector<std::string>& paths) {
    return std::find(paths.begin(), paths.end(), req.path) != paths.end();
  };
  if (t_refusing_connection && !listed(options.reserved_paths)) {
    WriteError(res, Status::ResourceExhausted("server busy: all " + std::to_string(options.worker_threads) +
                                              " connections are in use; retry later"));
    res.set_header("Retry-After", "1");
    CloseAfter(res);
    log::Debug("http connection refused: all workers busy", {{"server", options.name}});
    return httplib::Server::HandlerResponse::Handled;
  }
  if (listed(public_paths)) return httplib::Server::HandlerResponse::Unhandled;
  Result<const Credential*> auth = Authenticate(req);
  if (!auth.ok()) {
    WriteError(res, auth.status());
    if (HasBody(req)) CloseAfter(res);
    return httplib::Server::HandlerResponse::Handled;
  }
  // A client with a token no longer counts against its address.
  if (ServedConnection* connection = CurrentConnection()) connection->ReleasePeerSlot();
  return httplib::Server::HandlerResponse::Unhandled;
}

Status HttpServer::Impl::ReadBody(const httplib::Request& req, httplib::Response& res,
                                  const httplib::ContentReader& reader, size_t limit, std::string* body,
                                  bool* too_large) const {
  // A declared length over the limit is refused before a byte is read.
  const std::string declared = req.get_header_value("Content-Length");
  if (!declared.empty() && declared.size() < 20 &&
      declared.find_first_not_of("0123456789") == std::string::npos && std::stoull(declared) > limit) {
    *too_large = true;
    return BodyTooLarge(limit);
  }
  size_t received = 0;
  bool ok;
  bool multipart = req.is_multipart_form_data();
  if (multipart) {
    ok = reader([](const httplib::MultipartFormData&) { return true; },
                [&](const char*, size_t n) {
                  received += n;
                  return received <= limit;
                });
  } else {
    ok = reader([&](const char* data, size_t n) {
      received += n;
      if (received > limit) return false;
      body->append(data, n);
      return true;
    });
  }
  // httplib answers a Content-Length over max_body_bytes itself: it skips
  // the body and sets 413 without calling the receiver.
  if (received > limit || (!ok && res.status == 413)) {
    *too_large = true;
    std::string().swap(*body);
    return BodyTooLarge(limit);
  }
  if (!ok) {
    return Status::InvalidArgument(
        "could not read the request body (malformed, cut short or timed out)");
  }
  if (multipart) {
    return Status::InvalidArgument(
        "multipart/form-data bodies are not supported; send the raw bytes as the body");
  }
  return Status::Ok();
}

void HttpServer::Impl::Serve(const Route& route, const httplib::Request& req,
                             httplib::Response& res, const httplib::ContentReader* reader) const {
  // The token and scope are checked before a byte of the body is read; a
  // refused body stays unread and the connection closes after the reply.
  const Credential* credential = nullptr;
  if (!route.open) {
    Result<const Credential*> auth = Authorize(route, req);
    if (!auth.ok()) {
      if (reader != nullptr && HasBody(req)) CloseAfter(res);
      return WriteError(res, auth.status());
    }
    credential = *auth;
  }
  const size_t limit = route.json ? std::min(options.max_body_bytes, options.max_json_bytes) : options.max_body_bytes;
  std::string body;
  bool too_large = false;
  Status read = Status::Ok();
  if (reader != nullptr) {
    read = ReadBody(req, res, *reader, limit, &body, &too_large);
  } else {
    body = req.body;
  }
  if (ServedConnection* connection = CurrentConnection()) connection->EndBody();
  if (!read.ok()) {
    CloseAfter(res);
    return WriteError(res, read, too_large ? 413 : 0);
  }

  HttpRequest request;
  request.method = route.method;
  request.path = req.path;
  for (size_t i = 0; i < route.params.size() && i + 1 < req.matches.size(); ++i) {
    request.path_params[route.params[i]] = req.matches[i + 1].str();
  }
  for (const auto& [key, value] : req.params) request.query.emplace(key, value);
  request.headers = LowerCaseHeaders(req.headers);
  request.remote_addr = req.remote_addr;
  request.remote_port = req.remote_port;
  if (credential != nullptr) {
    request.client = credential->credential.name;
    request.scopes = credential->credential.scopes;
    request.every_scope = credential->every_scope;
  } else {
    request.every_scope = credentials.empty() && !route.open;
  }
  request.max_json_bytes = options.max_json_bytes;
  request.max_json_depth = options.max_json_depth;
  request.body = std::move(body);

  if (route.json) {
    if (!request.body.empty()) {
      Result<Json> parsed = request.ParseJsonBody();
      if (!parsed.ok()) return WriteError(res, parsed.status());
      request.json = std::move(parsed).value();
    }
    Result<Json> reply = CallHandler(route.json, request);
    if (!reply.ok()) return WriteError(res, reply.status());
    res.status = route.success_status;
    if (route.success_status != 204) res.set_content(DumpJson(*reply), "application/json");
    return;
  }
  if (route.raw) {
    Result<HttpResponse> reply = CallHandler(route.raw, request);
    if (!reply.ok()) return WriteError(res, reply.status());
    res.status = reply->status;
    for (const auto& [name, value] : reply->headers) res.set_header(name.c_str(), value);
    res.set_content(reply->body, reply->content_type);
    return;
  }
  Result<StreamResponse> reply = CallHandler(route.stream, request);
  if (!reply.ok()) return WriteError(res, reply.status());
  ServeStream(std::move(reply).value(), req, res);
}

void HttpServer::Impl::ServeStream(StreamResponse reply, const httplib::Request& req,
                                   httplib::Response& res) const {
  if (CompressedByHttplib(reply.content_type)) {
    return WriteError(res, Status::Internal("stream content type \"" + reply.content_type +
                                            "\" would be gzipped, holding chunks back"));
  }
  if (!reply.produce) return WriteError(res, Status::Internal("stream reply without a producer"));
  res.status = reply.status;
  for (const auto& [name, value] : reply.headers) res.set_header(name.c_str(), value);
  auto produce = std::make_shared<std::function<Status(ChunkWriter&)>>(std::move(reply.produce));
  std::string server_name = options.name;
  std::string path = req.path;
  // The provider runs on a worker thread, which Stop() joins before this
  // Impl goes away, so capturing `this` is safe.
  res.set_chunked_content_provider(
      reply.content_type, [this, produce, server_name, path](size_t, httplib::DataSink& sink) {
        SinkWriter writer(sink, stopping);
        Status status;
        try {
          status = (*produce)(writer);
        } catch (const std::exception& e) {
          status = Status::Internal(std::string("stream producer threw: ") + e.what());
        } catch (...) {
          status = Status::Internal("stream producer threw a non-standard exception");
        }
        if (!status.ok()) {
          log::Warn("http stream aborted",
                    {{"server", server_name}, {"path", path}, {"error", status.ToString()}});
          return false;
        }
        sink.done();
        return true;
      });
}

httplib::Server::HandlerResponse HttpServer::Impl::FillErrorReply(const httplib::Request& req,
                                                                  httplib::Response& res) const {
  if (!res.body.empty() || res.has_header("Content-Type")) {
    return httplib::Server::HandlerResponse::Unhandled;
  }
  Status status;
  int http_status = res.status;
  Result<const Credential*> auth = Authenticate(req);
  if (res.status == 404 && !auth.ok()) {
    // Without the token a client learns nothing about which routes exist.
    status = auth.status();
    http_status = 401;
  } else {
    switch (res.status) {
      case 400:
        status = Status::InvalidArgument("malformed HTTP request");
        break;
      case 404:
        status = Status::NotFound("no route for " + req.method + " " + req.path);
        break;
      case 413:
        status = BodyTooLarge(options.max_body_bytes);
        break;
      case 414:
        status = Status::InvalidArgument("request URI too long");
        break;
      case 416:
        status = Status::InvalidArgument("unsatisfiable Range header");
        break;
      default:
        status = Status(CodeFromHttpStatus(res.status), "HTTP " + std::to_string(res.status));
        break;
    }
  }
  WriteError(res, status, http_status);
  return httplib::Server::HandlerResponse::Handled;
}

HttpServer::HttpServer(HttpServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::HandleJson(HttpMethod method, std::string_view pattern, JsonHandler handler,
                            int success_status, std::string_view scope) {
  auto route = std::make_unique<Route>();
  route->scope = std::string(scope);
  route->json = std::move(handler);
  route->success_status = success_status;
  impl_->Add(method, pattern, std::move(route));
}

void HttpServer::HandleRaw(HttpMethod method, std::string_view pattern, RawHandler handler,
                           std::string_view scope) {
  auto route = std::make_unique<Route>();
  route->scope = std::string(scope);
  route->raw = std::move(handler);
  impl_->Add(method, pattern, std::move(route));
}

void HttpServer::HandleStream(HttpMethod method, std::string_view pattern, StreamHandler handler,
                              std::string_view scope) {
  auto route = std::make_unique<Route>();
  route->scope = std::string(scope);
  route->stream = std::move(handler);
  impl_->Add(method, pattern, std::move(route));
}

void HttpServer::HandlePublicJson(HttpMethod method, std::string_view path, JsonHandler handler) {
  auto route = std::make_unique<Route>();
  route->open = true;
  route->json = std::move(handler);
  impl_->public_paths.push_back(std::string(path));
  impl_->Add(method, path, std::move(route));
}

Status HttpServer::Start() {
  Impl& s = *impl_;
  const HttpServerOptions& o = s.options;
  if (s.state != Impl::State::kNew) {
    return Status::FailedPrecondition("http server " + o.name + " was already started");
  }
  FR_RETURN_IF_ERROR(s.setup_error);
  FR_RETURN_IF_ERROR(s.tls_error);

  // httplib's default sets SO_REUSEPORT, which lets a second server bind the
  // same port and silently take half the connections; SO_REUSEADDR alone
  // still allows a quick restart.
  s.server->set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  s.server->set_payload_max_length(o.max_body_bytes);
  s.server->set_read_timeout(o.read_timeout);
  s.server->set_write_timeout(o.write_timeout);
  s.server->set_keep_alive_timeout(static_cast<time_t>(o.keep_alive_timeout.count()));
  s.server->set_keep_alive_max_count(1000);
  s.server->set_tcp_nodelay(true);  // httplib's default of 5 would make clients reconnect
  size_t threads = std::max<size_t>(1, o.worker_threads);
  if (o.refuse_when_busy) {
    s.server->new_task_queue = [threads] { return new RefusingTaskQueue(threads); };
  } else {
    s.server->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  }
  s.server->set_pre_routing_handler(
      [&s](const httplib::Request& req, httplib::Response& res) { return s.PreRoute(req, res); });
  s.limits.read_timeout = o.read_timeout;
  s.limits.write_timeout = o.write_timeout;
  s.limits.keep_alive_timeout = o.keep_alive_timeout;
  s.limits.header_timeout = o.header_timeout;
  s.limits.body_timeout = o.body_timeout;
  s.server->set_error_handler(httplib::Server::HandlerWithResponse(
      [&s](const httplib::Request& req, httplib::Response& res) {
        return s.FillErrorReply(req, res);
      }));
  s.server->set_exception_handler(
      [&s](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "non-standard exception";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        log::Error("http request failed with an exception",
                   {{"server", s.options.name}, {"path", req.path}, {"error", what}});
        WriteError(res, Status::Internal("unhandled exception: " + what));
      });
  s.server->set_logger([&s](const httplib::Request& req, const httplib::Response& res) {
    log::Debug("http request", {{"server", s.options.name},
                                {"method", req.method},
                                {"path", req.path},
                                {"status", res.status}});
  });

  std::string address = o.host.find(':') != std::string::npos ? "[" + o.host + "]" : o.host;
  errno = 0;
  int port = o.port == 0 ? s.server->bind_to_any_port(o.host)
                         : (s.server->bind_to_port(o.host, o.port) ? o.port : -1);
  if (port < 0) {
    int err = errno;
    std::string what = "bind " + address + ":" + std::to_string(o.port);
    return err != 0 ? Status::FromErrno(err, what)
                    : Status::Unavailable(what + ": no usable address");
  }
  s.port = port;
  s.state = Impl::State::kRunning;
  s.thread = std::thread([&s] {
    s.server->listen_after_bind();
    s.listen_returned = true;
  });
  // Stop() only works once httplib has marked itself running.
  while (!s.server->is_running() && !s.listen_returned) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (!s.server->is_running()) {
    s.thread.join();
    s.state = Impl::State::kStopped;
    return Status::Unavailable("listen " + address + ":" + std::to_string(port) + " failed");
  }
  log::Info("http server listening",
            {{"server", o.name}, {"address", address + ":" + std::to_string(port)}});
  return Status::Ok();
}

namespace {

// cpp-httplib (0.11) keeps a worker on each idle keep-alive connection until
// its keep-alive timeout, and stop() waits for the workers: clients that
// keep connections (ours do) would hold Stop() for seconds. This process's
// sockets bound to the server's port, other than a listener, are exactly the
// connections it serves; shutting them down ends those waits at once.
void ShutDownServedConnections(int port) {
  DIR* fds = ::opendir("/proc/self/fd");
  if (fds == nullptr) return;  // Stop() then waits out the keep-alive timeout
  while (const dirent* entry = ::readdir(fds)) {
    const int fd = std::atoi(entry->d_name);
    if (fd <= 2 || fd == ::dirfd(fds)) continue;
    sockaddr_storage address {};
    socklen_t length = sizeof(address);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) continue;
    int local_port = -1;
    if (address.ss_family == AF_INET) local_port = ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
    if (address.ss_family == AF_INET6) local_port = ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port);
    int listening = 0;
    socklen_t size = sizeof(listening);
    if (local_port != port || ::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &size) != 0 || listening) {
      continue;
    }
    ::shutdown(fd, SHUT_RDWR);
  }
  ::closedir(fds);
}

}  // namespace

void HttpServer::Stop() {
  Impl& s = *impl_;
  if (s.state != Impl::State::kRunning) return;
  s.stopping = true;
  s.server->stop();
  ShutDownServedConnections(s.port);
  s.thread.join();
  s.state = Impl::State::kStopped;
  log::Info("http server stopped", {{"server", s.options.name}});
}

int HttpServer::port() const { return impl_->port; }

std::string HttpServer::base_url() const {
  const std::string& host = impl_->options.host;
  std::string address = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return (impl_->tls ? "https://" : "http://") + address + ":" + std::to_string(impl_->port);
}

}  // namespace flashroll
