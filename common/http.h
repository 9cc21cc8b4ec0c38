// HTTP on top of cpp-httplib: HttpServer for Flashroll's JSON APIs (the
// engine server, the sandbox node agent, the scheduler's trainer API) and
// HttpClient for calling them.
//
// Errors cross the wire as {"error": {"code": "<CodeName>", "message": "..."}}
// with an HTTP status chosen by HttpStatusFromCode; HttpClient turns such a
// body back into the same Status code and message, so a failure deep inside a
// sandbox reaches the rollout worker as if it had been a local call.
//
// Thread safety: an HttpServer is configured (Handle*) from one thread, then
// Start()/Stop() may be called from any one thread at a time; handlers run
// concurrently on the server's worker threads and must be thread-safe. An
// HttpClient is immutable after Create(); its methods may be called from any
// number of threads at once (each request uses its own connection).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "common/status.h"

namespace flashroll {

// The HTTP status for an error reply carrying `code`: invalid_argument 400,
// unauthenticated 401, permission_denied 403, not_found 404, already_exists
// 409, failed_precondition 409 (the resource's state forbids it; not a 5xx,
// which clients would retry), resource_exhausted 429, deadline_exceeded 504,
// unavailable 503, unimplemented 501, anything else 500. (The server itself
// answers 413 for an oversized body; that too is resource_exhausted.)
int HttpStatusFromCode(Code code);

// The Code for an HTTP status, for replies without a JSON error body: the
// inverse of HttpStatusFromCode where it is one-to-one (409 is
// kAlreadyExists; 413 and 429 are kResourceExhausted; other 4xx
// kInvalidArgument, other 5xx kInternal); kOk below 400.
Code CodeFromHttpStatus(int http_status);

// {"error": {"code": CodeName(status.code()), "message": status.message()}}.
Json ErrorJson(const Status& status);

// The Status described by an error reply. A body in ErrorJson's form yields
// its code and message; any other body yields CodeFromHttpStatus(http_status)
// with "HTTP <status>: <start of body>". Returns OK for a 2xx status and
// kInternal for 1xx/3xx (a reply Flashroll never expects).
Status StatusFromHttpReply(int http_status, std::string_view body);

// Reads a bearer token from `path`: surrounding whitespace is trimmed.
// Errors: the open/read syscall; kInvalidArgument for an empty file, a file
// over 4 KiB, or a token with inner whitespace or control characters (they
// would break the Authorization header). A file readable by group or others
// is accepted with a warning in the log.
Result<std::string> LoadTokenFile(const std::string& path);
// The tokens of a file that lists one a line (blank lines skipped), each
// checked as LoadTokenFile checks its one; kInvalidArgument also for a file
// without any, or one that lists a token twice.
Result<std::vector<std::string>> LoadTokenFileLines(const std::string& path);

enum class HttpMethod { kGet, kPost, kPut, kPatch, kDelete };

// "GET", "POST", ...
const char* HttpMethodName(HttpMethod method);

// A request as a handler sees it.
struct HttpRequest {
  HttpMethod method = HttpMethod::kGet;
  std::string path;                                 // decoded, without the query
  std::map<std::string, std::string> path_params;   // from ":name" and "*name" segments
  std::multimap<std::string, std::string> query;    // decoded ?key=value pairs
  std::multimap<std::string, std::string> headers;  // names lower-cased
  std::string body;                                 // raw bytes, at most max_body_bytes
  Json json;  // JSON routes only: the parsed body; null when the body is empty
  std::string remote_addr;
  int remote_port = 0;
  // The authenticated client: its credential's name ("default" for the
  // plain bearer_token; "" on a server without tokens and on public
  // routes) and scopes (every_scope for the plain bearer_token).
  std::string client;
  std::vector<std::string> scopes;
  bool every_scope = false;
  // The server's JSON limits (HttpServerOptions), for ParseJsonBody.
  size_t max_json_bytes = 1u << 20;
  size_t max_json_depth = 64;

  // The path parameter `name`, or "" when the route has none by that name.
  const std::string& Param(std::string_view name) const;
  // The first value of query parameter `name` (exact name), or of header
  // `name` (any case); nullopt when absent.
  std::optional<std::string> Query(std::string_view name) const;
  std::optional<std::string> Header(std::string_view name) const;
  // The JSON body as a view named "body", for typed field access.
  JsonView Body() const { return JsonView(json, "body"); }
  // The raw body parsed as JSON under the server's JSON limits, for raw
  // routes that take JSON: kResourceExhausted past max_json_bytes,
  // kInvalidArgument past max_json_depth or for malformed JSON.
  Result<Json> ParseJsonBody() const;
  // Whether the client's credential holds `scope` (always true on a server
  // without tokens).
  bool Holds(std::string_view scope) const;
};

// A reply from a raw handler, or a reply received by HttpClient.
struct HttpResponse {
  int status = 200;
  std::string content_type = "application/octet-stream";
  std::string body;
  // Extra headers to send (server), or every header received with its name
  // lower-cased (client).
  std::multimap<std::string, std::string> headers;

  std::optional<std::string> Header(std::string_view name) const;
};

// Sends the chunks of a streamed (chunked transfer encoding) response.
class ChunkWriter {
 public:
  virtual ~ChunkWriter() = default;
  // Sends `data` as one chunk at once; empty data is ignored. Returns false
  // once the client has gone away or the server is stopping: the producer
  // should stop then (returning an error, so the client sees the cut).
  virtual bool Write(std::string_view data) = 0;
};

// A streamed reply: headers go out first, then `produce` writes the body.
struct StreamResponse {
  int status = 200;
  // Must be a type cpp-httplib does not gzip on the fly (not text/* except
  // text/event-stream, not application/json): compression would hold chunks
  // back. A compressible type fails the request with a 500.
  std::string content_type = "application/octet-stream";
  std::multimap<std::string, std::string> headers;
  // Runs on the server's worker thread. Returning OK ends the body normally;
  // an error aborts the connection without the final chunk, so the client
  // sees a truncated transfer rather than a body that looks complete.
  std::function<Status(ChunkWriter&)> produce;
};

// Handlers return a value or the Status that becomes the JSON error reply.
using JsonHandler = std::function<Result<Json>(const HttpRequest&)>;
using RawHandler = std::function<Result<HttpResponse>(const HttpRequest&)>;
using StreamHandler = std::function<Result<StreamResponse>(const HttpRequest&)>;

// A bearer token a server accepts and the scopes it holds: a route
// registered with a scope answers 403 to a token without it.
struct HttpCredential {
  std::string name;  // names the client in errors and logs, never the token
  std::string token;
  std::vector<std::string> scopes;
};

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;              // 0: an ephemeral port, reported by port()
  // One token holding every scope, named "default". With `credentials` as
  // well, both are accepted. Both empty: no authentication.
  std::string bearer_token;
  std::vector<HttpCredential> credentials;
  // PEM files: with both set the server speaks HTTPS only (TLS 1.2 or
  // newer); the certificate file may hold the chain after the leaf.
  std::string tls_cert_file;
  std::string tls_key_file;
  size_t max_body_bytes = 16u << 20;
  // JSON bodies (JSON routes, and HttpRequest::ParseJsonBody): at most this
  // many bytes and this deep a nesting of arrays and objects, checked before
  // parsing (a parsed value costs tens of bytes per byte of text).
  size_t max_json_bytes = 1u << 20;
  size_t max_json_depth = 64;
  // The longest wait for the next bytes of a request, and for the client to
  // accept the next bytes of a reply.
  std::chrono::milliseconds read_timeout{30000};
  std::chrono::milliseconds write_timeout{30000};
  // Whole-phase bounds, however the bytes trickle in: a new connection's
  // request line and headers (its TLS handshake included) arrive within
  // header_timeout of the accept, a later request's within header_timeout of
  // its first byte; a body within body_timeout of the headers. Past them the
  // connection is closed without a reply.
  std::chrono::milliseconds header_timeout{10000};
  std::chrono::milliseconds body_timeout{60000};
  // How long an idle keep-alive connection is held; Stop() may wait this long.
  std::chrono::seconds keep_alive_timeout{5};
  // Concurrent connections served; each keep-alive client holds one.
  size_t worker_threads = 16;
  // Connections that have not yet sent a request with a valid token (a
  // public route's requests do not count as one), per peer address and in
  // all; 0: no bound. One more is answered 429 at once ("Connection: close",
  // without reading the request; over TLS it is closed without a reply).
  // Then a client without a token holds at most these many workers, each
  // for at most header_timeout.
  size_t max_unauthenticated_per_peer = 0;
  size_t max_unauthenticated = 0;
  // What a connection that arrives while all worker_threads hold one gets:
  // false, it waits for a free worker; true, a 429 (resource_exhausted
  // ErrorJson, "Connection: close", "Retry-After: 1") from a small separate
  // pool of two, so a burst of clients never queues behind busy workers.
  // The pool serves the requests for `reserved_paths` instead of refusing
  // them (a health check, metrics), so they answer while workers are full.
  bool refuse_when_busy = false;
  std::vector<std::string> reserved_paths;
  std::string name = "http";  // names the server in log lines
};

// An HTTP server on a background thread.
//
// Routes are path patterns whose segments are literals, ":name" (one
// segment) or, as the last segment, "*name" (the rest of the path, slashes
// included); the matched parts land in HttpRequest::path_params.
//
// Every reply with status >= 400 has an ErrorJson body: handler errors,
// 401 (missing or unknown bearer token; the unknown routes of an
// authenticated server answer 401 too, not 404, to a client without a
// token), 403 (a token without the route's scope; the body is not read into
// the handler), 400
// (malformed JSON or request), 404 (no route), 413 (body over
// max_body_bytes, whether sent with Content-Length, chunked or compressed).
// Tokens and scopes are checked on the headers, before any of the body is
// read; a request refused before or while its body is read (401, 403, 413)
// is the connection's last reply ("Connection: close"), as the unread rest
// of the body would not start a request.
class HttpServer {
 public:
  explicit HttpServer(HttpServerOptions options);
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;
  // Stops the server if it is running.
  ~HttpServer();

  // Route registration; call before Start(). A malformed pattern is
  // reported by Start(). A JSON route answers `success_status` with the
  // handler's JSON value on success; a malformed JSON body is answered 400
  // without calling the handler. A non-empty `scope` admits only
  // credentials holding it.
  void HandleJson(HttpMethod method, std::string_view pattern, JsonHandler handler,
                  int success_status = 200, std::string_view scope = {});
  void HandleRaw(HttpMethod method, std::string_view pattern, RawHandler handler,
                 std::string_view scope = {});
  void HandleStream(HttpMethod method, std::string_view pattern, StreamHandler handler,
                    std::string_view scope = {});
  // A route that needs no token (a health check); `path` is a literal path.
  void HandlePublicJson(HttpMethod method, std::string_view path, JsonHandler handler);

  // Binds host:port and serves on a background thread; returns once the
  // server accepts connections. Errors: kInvalidArgument for a bad route
  // pattern or TLS files that do not load (naming the file and OpenSSL's
  // reason), the bind(2) failure (e.g. "bind 127.0.0.1:8080: Address
  // already in use"), kFailedPrecondition if already started.
  Status Start();

  // Stops accepting connections, waits for requests in flight (and up to
  // keep_alive_timeout for idle keep-alive connections), joins the thread.
  // Streams in flight see ChunkWriter::Write fail and are expected to end.
  // Does nothing if not running. A stopped server cannot be started again.
  void Stop();

  // The bound port (after a successful Start()), and "http://host:port"
  // ("https://" with TLS).
  int port() const;
  std::string base_url() const;

 private:
  struct Impl;  // keeps cpp-httplib out of this header
  std::unique_ptr<Impl> impl_;
};

struct HttpClientOptions {
  // "http://host:port" or "https://host:port", optionally with a path
  // prefix ("http://10.0.0.5:9000/api") that is put before every path.
  std::string base_url;
  std::string bearer_token;  // empty: no Authorization header
  // https: a PEM file of the certificates to trust (e.g. a self-signed
  // server's own); empty: the system's CA store. The server's name is
  // always verified against its certificate.
  std::string ca_cert_file;
  std::chrono::milliseconds connect_timeout{5000};
  // The longest wait for the next bytes of the reply (not the whole reply).
  std::chrono::milliseconds read_timeout{60000};
  std::chrono::milliseconds write_timeout{60000};
};

class HttpConnectionPool;

// A client for one base URL.
//
// Requests reuse idle keep-alive connections (up to 4, each idle for less
// than 1 s, inside servers' usual 5 s keep-alive), so most cost no TCP
// connect; copies of a client share them. Streams use their own connection.
// Thread safety: a client (and its copies) may be used from many threads.
//
// Transport failures come back as kUnavailable (refused, reset, closed) or
// kDeadlineExceeded (connect or read timeout); the message names the method
// and URL. Raw calls return any HTTP status as a value; the JSON calls turn
// a non-2xx reply into its Status (StatusFromHttpReply).
class HttpClient {
 public:
  // Returns kInvalidArgument for a base URL that is not http(s)://host[:port][/prefix].
  static Result<HttpClient> Create(HttpClientOptions options);

  // Raw requests. `path` starts with "/" and may carry a query string.
  Result<HttpResponse> Send(HttpMethod method, std::string_view path, std::string_view body = {},
                            std::string_view content_type = "application/octet-stream") const;
  Result<HttpResponse> Get(std::string_view path) const { return Send(HttpMethod::kGet, path); }
  Result<HttpResponse> Delete(std::string_view path) const {
    return Send(HttpMethod::kDelete, path);
  }
  Result<HttpResponse> Post(std::string_view path, std::string_view body,
                            std::string_view content_type) const {
    return Send(HttpMethod::kPost, path, body, content_type);
  }
  Result<HttpResponse> Put(std::string_view path, std::string_view body,
                           std::string_view content_type) const {
    return Send(HttpMethod::kPut, path, body, content_type);
  }

  // JSON requests: on a 2xx reply returns the parsed body (null when empty);
  // otherwise the reply's Status, a transport error, or kInvalidArgument
  // for a 2xx body that is not JSON. A null `body` sends no body.
  Result<Json> SendJson(HttpMethod method, std::string_view path, const Json& body = nullptr) const;
  Result<Json> GetJson(std::string_view path) const { return SendJson(HttpMethod::kGet, path); }
  Result<Json> DeleteJson(std::string_view path) const {
    return SendJson(HttpMethod::kDelete, path);
  }
  Result<Json> PostJson(std::string_view path, const Json& body) const {
    return SendJson(HttpMethod::kPost, path, body);
  }
  Result<Json> PutJson(std::string_view path, const Json& body) const {
    return SendJson(HttpMethod::kPut, path, body);
  }

  // GETs `path` and passes each piece of a 2xx body to `on_chunk` as it
  // arrives. Returns OK once the whole body was received, the first error
  // from on_chunk (the transfer is abandoned), the reply's Status for a
  // non-2xx reply, or a transport error (a truncated stream included).
  Status GetStream(std::string_view path,
                   const std::function<Status(std::string_view chunk)>& on_chunk) const;

  const std::string& base_url() const { return options_.base_url; }

 private:
  HttpClient(HttpClientOptions options, std::string origin, std::string prefix);

  HttpClientOptions options_;
  std::string origin_;  // "scheme://host:port"
  std::string prefix_;  // "" or "/api"
  std::shared_ptr<HttpConnectionPool> connections_;
};

}  // namespace flashroll
