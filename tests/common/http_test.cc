#include "common/http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace flashroll {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr char kToken[] = "s3cret-token";
constexpr size_t kMaxBody = 64 * 1024;

// All codes but kOk, found through their names so new codes are covered too.
std::vector<Code> AllErrorCodes() {
  std::vector<Code> codes;
  for (int i = 1; std::string(CodeName(static_cast<Code>(i))) != "unknown"; ++i) {
    codes.push_back(static_cast<Code>(i));
  }
  return codes;
}

// A raw TCP connection, to speak HTTP byte by byte where a client library
// would hide what is being tested.
class RawConnection {
 public:
  explicit RawConnection(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    timeval tv{5, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  ~RawConnection() { ::close(fd_); }
  bool connected() const { return connected_; }

  bool Send(std::string_view data) {
    while (!data.empty()) {
      ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // Reads one response with a Content-Length body; "" on EOF or timeout.
  std::string ReadResponse() {
    while (buffer_.find("\r\n\r\n") == std::string::npos) {
      if (!Fill()) return "";
    }
    size_t header_end = buffer_.find("\r\n\r\n") + 4;
    std::string head = buffer_.substr(0, header_end);
    size_t length = 0;
    size_t at = head.find("Content-Length: ");
    if (at != std::string::npos) length = std::stoul(head.substr(at + 16));
    while (buffer_.size() < header_end + length) {
      if (!Fill()) return "";
    }
    std::string response = buffer_.substr(0, header_end + length);
    buffer_.erase(0, header_end + length);
    return response;
  }

 private:
  bool Fill() {
    char chunk[65536];
    ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
    if (n <= 0) return false;
    buffer_.append(chunk, static_cast<size_t>(n));
    return true;
  }

  int fd_;
  bool connected_ = false;
  std::string buffer_;
};

class HttpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpServerOptions options;
    options.bearer_token = kToken;
    options.max_body_bytes = kMaxBody;
    options.read_timeout = milliseconds(500);
    options.keep_alive_timeout = std::chrono::seconds(1);
    options.worker_threads = 8;
    options.name = "test";
    server_ = std::make_unique<HttpServer>(options);
    AddRoutes();
    Status started = server_->Start();
    ASSERT_TRUE(started.ok()) << started.ToString();
    ASSERT_GT(server_->port(), 0);
    client_ = MakeClient(kToken);
  }

  std::unique_ptr<HttpClient> MakeClient(const std::string& token,
                                         milliseconds read_timeout = milliseconds(10000)) {
    HttpClientOptions options;
    options.base_url = server_->base_url();
    options.bearer_token = token;
    options.read_timeout = read_timeout;
    Result<HttpClient> client = HttpClient::Create(options);
    EXPECT_TRUE(client.ok()) << client.status().ToString();
    return std::make_unique<HttpClient>(std::move(client).value());
  }

  void AddRoutes() {
    server_->HandleJson(HttpMethod::kGet, "/v1/ping", [](const HttpRequest&) -> Result<Json> {
      return Json{{"pong", true}};
    });
    server_->HandleJson(HttpMethod::kGet, "/v1/whoami", [](const HttpRequest& req) -> Result<Json> {
      return Json{{"port", req.remote_port}};
    });
    server_->HandleJson(HttpMethod::kPost, "/v1/echo",
                        [](const HttpRequest& req) -> Result<Json> { return req.json; });
    server_->HandleJson(
        HttpMethod::kPost, "/v1/sandboxes/:id/exec", [](const HttpRequest& req) -> Result<Json> {
          JsonView body = req.Body();
          FR_RETURN_IF_ERROR(body.ExpectOnlyKeys({"cmd", "timeout_ms"}));
          FR_ASSIGN_OR_RETURN(std::vector<std::string> cmd, body.GetStringArray("cmd"));
          FR_ASSIGN_OR_RETURN(int64_t timeout, body.GetInt("timeout_ms", 1000));
          return Json{{"id", req.Param("id")}, {"argc", cmd.size()}, {"timeout_ms", timeout}};
        });
    server_->HandleJson(
        HttpMethod::kPost, "/v1/created",
        [](const HttpRequest&) -> Result<Json> {
          return Json{{"id", "sb-1"}};
        },
        201);
    server_->HandleJson(HttpMethod::kGet, "/v1/fail/:code",
                        [](const HttpRequest& req) -> Result<Json> {
                          for (Code code : AllErrorCodes()) {
                            if (req.Param("code") == CodeName(code))
                              return Status(code, "failed on purpose");
                          }
                          return Json{{"unknown", req.Param("code")}};
                        });
    server_->HandleJson(HttpMethod::kGet, "/v1/slow", [](const HttpRequest& req) -> Result<Json> {
      std::this_thread::sleep_for(milliseconds(std::stoi(req.Query("ms").value_or("0"))));
      return Json{{"slept", true}};
    });
    server_->HandleJson(HttpMethod::kGet, "/v1/throw", [](const HttpRequest&) -> Result<Json> {
      throw std::runtime_error("bug in handler");
    });
    server_->HandleJson(HttpMethod::kGet, "/v1/items/:id",
                        [](const HttpRequest& req) -> Result<Json> {
                          return Json{{"id", req.Param("id")},
                                      {"q", req.Query("q").value_or("")},
                                      {"agent", req.Header("X-Agent").value_or("")}};
                        });
    server_->HandleRaw(HttpMethod::kPut, "/v1/files/*path",
                       [this](const HttpRequest& req) -> Result<HttpResponse> {
                         std::lock_guard<std::mutex> lock(files_mu_);
                         files_[req.Param("path")] = req.body;
                         HttpResponse reply;
                         reply.status = 204;
                         return reply;
                       });
    server_->HandleRaw(HttpMethod::kGet, "/v1/files/*path",
                       [this](const HttpRequest& req) -> Result<HttpResponse> {
                         std::lock_guard<std::mutex> lock(files_mu_);
                         auto it = files_.find(req.Param("path"));
                         if (it == files_.end())
                           return Status::NotFound("no file " + req.Param("path"));
                         HttpResponse reply;
                         reply.body = it->second;
                         reply.headers.emplace("X-Size", std::to_string(it->second.size()));
                         return reply;
                       });
    server_->HandleStream(HttpMethod::kGet, "/v1/stream",
                          [this](const HttpRequest&) -> Result<StreamResponse> {
                            StreamResponse reply;
                            reply.content_type = "application/x-ndjson";
                            reply.produce = [this](ChunkWriter& out) {
                              out.Write("first\n");
                              // Wait until the client has the first chunk: it
                              // must not be held back until the end.
                              auto deadline = Clock::now() + std::chrono::seconds(5);
                              while (!client_saw_first_ && Clock::now() < deadline) {
                                std::this_thread::sleep_for(milliseconds(1));
                              }
                              first_delivered_early_ = client_saw_first_.load();
                              for (int i = 0; i < 100; ++i)
                                out.Write("line " + std::to_string(i) + "\n");
                              return Status::Ok();
                            };
                            return reply;
                          });
    server_->HandleStream(HttpMethod::kGet, "/v1/stream-forever",
                          [](const HttpRequest&) -> Result<StreamResponse> {
                            StreamResponse reply;
                            reply.produce = [](ChunkWriter& out) {
                              while (out.Write("tick\n"))
                                std::this_thread::sleep_for(milliseconds(5));
                              return Status::Unavailable("stream ended: server stopping");
                            };
                            return reply;
                          });
    server_->HandleStream(HttpMethod::kGet, "/v1/stream-broken",
                          [](const HttpRequest&) -> Result<StreamResponse> {
                            StreamResponse reply;
                            reply.produce = [](ChunkWriter& out) {
                              out.Write("partial");
                              return Status::IoError("read /dev/sandbox: gone");
                            };
                            return reply;
                          });
    server_->HandleStream(HttpMethod::kGet, "/v1/stream-text",
                          [](const HttpRequest&) -> Result<StreamResponse> {
                            StreamResponse reply;
                            reply.content_type = "text/plain";
                            reply.produce = [](ChunkWriter&) { return Status::Ok(); };
                            return reply;
                          });
  }

  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<HttpClient> client_;
  std::mutex files_mu_;
  std::map<std::string, std::string> files_;
  std::atomic<bool> client_saw_first_{false};
  std::atomic<bool> first_delivered_early_{false};
};

Json ErrorOf(const HttpResponse& reply) { return ParseJson(reply.body).value()["error"]; }

TEST(HttpMapping, StatusCodesFollowTheTable) {
  EXPECT_EQ(HttpStatusFromCode(Code::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusFromCode(Code::kUnauthenticated), 401);
  EXPECT_EQ(HttpStatusFromCode(Code::kPermissionDenied), 403);
  EXPECT_EQ(HttpStatusFromCode(Code::kNotFound), 404);
  EXPECT_EQ(HttpStatusFromCode(Code::kAlreadyExists), 409);
  EXPECT_EQ(HttpStatusFromCode(Code::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatusFromCode(Code::kDeadlineExceeded), 504);
  EXPECT_EQ(HttpStatusFromCode(Code::kUnavailable), 503);
  EXPECT_EQ(HttpStatusFromCode(Code::kUnimplemented), 501);
  EXPECT_EQ(HttpStatusFromCode(Code::kInternal), 500);
  EXPECT_EQ(HttpStatusFromCode(Code::kIoError), 500);
  EXPECT_EQ(HttpStatusFromCode(Code::kCorruption), 500);
  EXPECT_EQ(CodeFromHttpStatus(413), Code::kResourceExhausted);
  EXPECT_EQ(CodeFromHttpStatus(418), Code::kInvalidArgument);
  EXPECT_EQ(CodeFromHttpStatus(502), Code::kUnavailable);
  EXPECT_EQ(CodeFromHttpStatus(599), Code::kInternal);
}

// A reply without an error body keeps its code where the table is one-to-one.
TEST(HttpMapping, CodeFromHttpStatusInvertsTheOneToOneCodes) {
  for (Code code : {Code::kInvalidArgument, Code::kUnauthenticated, Code::kPermissionDenied, Code::kNotFound,
                    Code::kAlreadyExists, Code::kDeadlineExceeded, Code::kUnavailable, Code::kUnimplemented,
                    Code::kInternal}) {
    EXPECT_EQ(CodeFromHttpStatus(HttpStatusFromCode(code)), code) << HttpStatusFromCode(code);
  }
  EXPECT_EQ(CodeFromHttpStatus(200), Code::kOk);
}

TEST(HttpMapping, StatusFromHttpReplyReadsErrorBodies) {
  Status s =
      StatusFromHttpReply(404, R"({"error": {"code": "not_found", "message": "no sandbox sb-9"}})");
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_EQ(s.message(), "no sandbox sb-9");
  // The code in the body wins over the HTTP status.
  EXPECT_EQ(StatusFromHttpReply(500, R"({"error": {"code": "corruption", "message": "m"}})").code(),
            Code::kCorruption);
  Status plain = StatusFromHttpReply(502, "<html>bad gateway</html>\n");
  EXPECT_EQ(plain.code(), Code::kUnavailable);
  EXPECT_EQ(plain.message(), "HTTP 502: <html>bad gateway</html>");
  EXPECT_EQ(StatusFromHttpReply(503, "").message(), "HTTP 503");
  EXPECT_EQ(StatusFromHttpReply(400, R"({"error": {"code": "ok", "message": "x"}})").code(),
            Code::kInvalidArgument);
  EXPECT_TRUE(StatusFromHttpReply(204, "").ok());
  EXPECT_EQ(StatusFromHttpReply(302, "").code(), Code::kInternal);
}

TEST_F(HttpTest, MissingTokenIs401WithJsonError) {
  auto anonymous = MakeClient("");
  Result<HttpResponse> reply = anonymous->Get("/v1/ping");
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->status, 401);
  EXPECT_EQ(reply->content_type, "application/json");
  EXPECT_EQ(reply->Header("WWW-Authenticate").value_or(""), "Bearer");
  EXPECT_EQ(ErrorOf(*reply)["code"], "unauthenticated");

  Result<Json> json = anonymous->GetJson("/v1/ping");
  EXPECT_EQ(json.status().code(), Code::kUnauthenticated);
  EXPECT_NE(json.status().message().find("missing bearer token"), std::string::npos);
}

// Requests from one client reuse its keep-alive connection (the server sees
// the same client port), also from a copy of the client; a server stopped
// with such a connection open stops at once, and after it restarts on the
// same port the stale connection is replaced unnoticed.
TEST_F(HttpTest, ClientReusesItsConnectionAndSurvivesARestart) {
  Result<Json> first = client_->GetJson("/v1/whoami");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const HttpClient copy = *client_;
  for (int i = 0; i < 5; ++i) {
    Result<Json> again = (i % 2 ? copy : *client_).GetJson("/v1/whoami");
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ((*again)["port"], (*first)["port"]) << "request " << i << " opened a new connection";
  }
  const int port = server_->port();
  const auto stop_start = std::chrono::steady_clock::now();
  server_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - stop_start, milliseconds(500))
      << "Stop() waited for the idle keep-alive connection";
  HttpServerOptions options;
  options.port = port;
  options.bearer_token = kToken;
  options.name = "restarted";
  server_ = std::make_unique<HttpServer>(options);
  AddRoutes();
  ASSERT_TRUE(server_->Start().ok());
  Result<Json> after = client_->GetJson("/v1/whoami");
  ASSERT_TRUE(after.ok()) << after.status().ToString();
}

TEST_F(HttpTest, WrongTokenIs401AndRightTokenIs200) {
  auto wrong = MakeClient("s3cret-tokem");
  Result<Json> denied = wrong->GetJson("/v1/ping");
  EXPECT_EQ(denied.status().code(), Code::kUnauthenticated);
  EXPECT_EQ(denied.status().message(), "invalid bearer token");
  EXPECT_EQ(MakeClient("s3cret")->GetJson("/v1/ping").status().code(), Code::kUnauthenticated);

  Result<HttpResponse> ok = client_->Get("/v1/ping");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(ParseJson(ok->body).value(), (Json{{"pong", true}}));
}

TEST_F(HttpTest, UnauthenticatedPostIs401EvenWithABody) {
  auto anonymous = MakeClient("");
  Result<Json> r = anonymous->PostJson("/v1/echo", Json{{"a", 1}});
  EXPECT_EQ(r.status().code(), Code::kUnauthenticated);
}

TEST_F(HttpTest, UnknownRouteIs404WithTokenAnd401Without) {
  Result<HttpResponse> reply = client_->Get("/v1/nope");
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply->status, 404);
  EXPECT_EQ(ErrorOf(*reply)["code"], "not_found");
  EXPECT_EQ(ErrorOf(*reply)["message"], "no route for GET /v1/nope");

  Result<HttpResponse> anonymous = MakeClient("")->Get("/v1/nope");
  ASSERT_TRUE(anonymous.ok());
  EXPECT_EQ(anonymous->status, 401);

  EXPECT_EQ(client_->PostJson("/v1/ping", Json{{"x", 1}}).status().code(), Code::kNotFound);
}

TEST_F(HttpTest, MalformedJsonIs400WithJsonErrorBody) {
  Result<HttpResponse> reply = client_->Post("/v1/echo", "{\"a\": [1, 2", "application/json");
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply->status, 400);
  EXPECT_EQ(reply->content_type, "application/json");
  Json error = ErrorOf(*reply);
  EXPECT_EQ(error["code"], "invalid_argument");
  EXPECT_EQ(error["message"].get<std::string>().rfind("request body: parse error at byte 11", 0),
            0u)
      << error["message"];
}

TEST_F(HttpTest, JsonBodyRoundTrips) {
  Json body = {{"text", "héllo"}, {"n", 3}, {"list", {1, 2, 3}}};
  Result<Json> echoed = client_->PostJson("/v1/echo", body);
  ASSERT_TRUE(echoed.ok()) << echoed.status().ToString();
  EXPECT_EQ(*echoed, body);
}

TEST_F(HttpTest, TypedFieldErrorsReachTheClient) {
  Result<Json> bad = client_->PostJson("/v1/sandboxes/sb-7/exec", Json{{"cmd", {"ls", 3}}});
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "body.cmd[1]: expected a string, got number");

  Result<Json> typo =
      client_->PostJson("/v1/sandboxes/sb-7/exec", Json{{"cmd", {"ls"}}, {"timout_ms", 5}});
  EXPECT_EQ(typo.status().message(), "body: unknown field \"timout_ms\"");

  Result<Json> ok = client_->PostJson("/v1/sandboxes/sb-7/exec", Json{{"cmd", {"ls", "-l"}}});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(*ok, (Json{{"id", "sb-7"}, {"argc", 2}, {"timeout_ms", 1000}}));
}

TEST_F(HttpTest, SuccessStatusIsConfigurable) {
  Result<HttpResponse> reply = client_->Post("/v1/created", "", "application/json");
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply->status, 201);
  EXPECT_TRUE(client_->PostJson("/v1/created", Json::object()).ok());
}

TEST_F(HttpTest, PathParamsQueryAndHeaders) {
  httplib::Client raw(server_->base_url());
  raw.set_bearer_token_auth(kToken);
  auto reply = raw.Get("/v1/items/it%2042?q=a%26b", httplib::Headers{{"X-Agent", "probe"}});
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->status, 200);
  EXPECT_EQ(ParseJson(reply->body).value(),
            (Json{{"id", "it 42"}, {"q", "a&b"}, {"agent", "probe"}}));
}

TEST_F(HttpTest, OversizedBodyWithContentLengthIs413) {
  std::string big(kMaxBody + 1, 'x');
  Result<HttpResponse> reply = client_->Post("/v1/echo", big, "application/json");
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->status, 413);
  EXPECT_EQ(ErrorOf(*reply)["code"], "resource_exhausted");

  Result<Json> json = client_->PostJson("/v1/echo", Json{{"s", std::string(kMaxBody, 'y')}});
  EXPECT_EQ(json.status().code(), Code::kResourceExhausted);
  EXPECT_NE(json.status().message().find("exceeds the limit of 65536 bytes"), std::string::npos);

  // Exactly at the limit is fine.
  std::string fits = "\"" + std::string(kMaxBody - 2, 'z') + "\"";
  Result<HttpResponse> at_limit = client_->Post("/v1/echo", fits, "application/json");
  ASSERT_TRUE(at_limit.ok());
  EXPECT_EQ(at_limit->status, 200);
}

TEST_F(HttpTest, OversizedChunkedBodyIs413) {
  httplib::Client raw(server_->base_url());
  raw.set_bearer_token_auth(kToken);
  const std::string piece(16 * 1024, 'c');
  auto reply = raw.Post(
      "/v1/echo",
      [&](size_t offset, httplib::DataSink& sink) {
        if (offset >= 5 * piece.size()) {
          sink.done();
        } else {
          sink.write(piece.data(), piece.size());
        }
        return true;
      },
      "application/json");
  ASSERT_TRUE(reply) << httplib::to_string(reply.error());
  EXPECT_EQ(reply->status, 413);
  EXPECT_EQ(ParseJson(reply->body).value()["error"]["code"], "resource_exhausted");
}

TEST_F(HttpTest, OversizedBodyAfterDecompressionIs413) {
  // 1 MiB of zeros gzips to about 1 KiB: only the inflated size is over.
  httplib::Client raw(server_->base_url());
  raw.set_bearer_token_auth(kToken);
  raw.set_compress(true);
  auto reply = raw.Post("/v1/echo", std::string(1 << 20, '0'), "application/json");
  ASSERT_TRUE(reply) << httplib::to_string(reply.error());
  EXPECT_EQ(reply->status, 413);
}

// A request refused on its headers leaves its body unread, so its reply is
// the connection's last; one without a body keeps the connection.
TEST_F(HttpTest, RejectedBodyIsLeftUnreadAndClosesTheConnection) {
  RawConnection conn(server_->port());
  ASSERT_TRUE(conn.connected());
  ASSERT_TRUE(conn.Send("GET /v1/ping HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::string first = conn.ReadResponse();
  EXPECT_EQ(first.rfind("HTTP/1.1 401", 0), 0u) << first.substr(0, 200);
  ASSERT_TRUE(conn.Send(std::string("GET /v1/ping HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ") +
                        kToken + "\r\n\r\n"));
  std::string second = conn.ReadResponse();
  EXPECT_EQ(second.rfind("HTTP/1.1 200", 0), 0u) << second.substr(0, 200);

  std::string body(32 * 1024, 'b');
  ASSERT_TRUE(
      conn.Send("POST /v1/echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                "Content-Length: " +
                std::to_string(body.size()) + "\r\n\r\n" + body));
  std::string third = conn.ReadResponse();
  EXPECT_EQ(third.rfind("HTTP/1.1 401", 0), 0u) << third.substr(0, 200);
  EXPECT_NE(third.find("Connection: close"), std::string::npos) << third.substr(0, 300);
  EXPECT_EQ(conn.ReadResponse(), "");  // closed
}

TEST_F(HttpTest, ClientReadTimeoutIsHonoured) {
  auto impatient = MakeClient(kToken, milliseconds(200));
  auto start = Clock::now();
  Result<Json> r = impatient->GetJson("/v1/slow?ms=1500");
  auto elapsed = Clock::now() - start;
  EXPECT_EQ(r.status().code(), Code::kDeadlineExceeded) << r.status().ToString();
  EXPECT_NE(r.status().message().find("GET " + server_->base_url() + "/v1/slow?ms=1500"),
            std::string::npos)
      << r.status().message();
  EXPECT_GE(elapsed, milliseconds(200));
  EXPECT_LT(elapsed, milliseconds(1200));

  // A patient client gets the answer.
  EXPECT_TRUE(client_->GetJson("/v1/slow?ms=300").ok());
}

TEST_F(HttpTest, ServerReadTimeoutEndsAStalledRequest) {
  RawConnection conn(server_->port());
  ASSERT_TRUE(conn.connected());
  auto start = Clock::now();
  ASSERT_TRUE(conn.Send(std::string("POST /v1/echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ") +
                        kToken + "\r\nContent-Length: 100\r\n\r\n{\"a\""));
  std::string reply = conn.ReadResponse();
  auto elapsed = Clock::now() - start;
  EXPECT_EQ(reply.rfind("HTTP/1.1 400", 0), 0u) << reply;
  EXPECT_NE(reply.find("could not read the request body"), std::string::npos) << reply;
  EXPECT_LT(elapsed, milliseconds(3000));
}

TEST_F(HttpTest, ErrorCodesRoundTripThroughTheWire) {
  for (Code code : AllErrorCodes()) {
    std::string path = std::string("/v1/fail/") + CodeName(code);
    Result<HttpResponse> raw = client_->Get(path);
    ASSERT_TRUE(raw.ok());
    EXPECT_EQ(raw->status, HttpStatusFromCode(code)) << CodeName(code);
    EXPECT_EQ(ErrorOf(*raw)["code"], CodeName(code));

    Result<Json> r = client_->GetJson(path);
    EXPECT_EQ(r.status().code(), code) << CodeName(code);
    EXPECT_EQ(r.status().message(), "failed on purpose");
  }
}

TEST_F(HttpTest, ThrowingHandlerIs500Internal) {
  Result<Json> r = client_->GetJson("/v1/throw");
  EXPECT_EQ(r.status().code(), Code::kInternal);
  EXPECT_EQ(r.status().message(), "handler threw: bug in handler");
  // The server is still serving.
  EXPECT_TRUE(client_->GetJson("/v1/ping").ok());
}

TEST_F(HttpTest, RawUploadAndDownloadKeepBytes) {
  std::string data;
  for (int i = 0; i < 5000; ++i) data += static_cast<char>(i % 256);
  Result<HttpResponse> put =
      client_->Put("/v1/files/work/dir/a.bin", data, "application/octet-stream");
  ASSERT_TRUE(put.ok());
  EXPECT_EQ(put->status, 204);

  Result<HttpResponse> got = client_->Get("/v1/files/work/dir/a.bin");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->status, 200);
  EXPECT_EQ(got->content_type, "application/octet-stream");
  EXPECT_EQ(got->Header("x-size").value_or(""), "5000");
  EXPECT_EQ(got->body, data);

  Result<HttpResponse> missing = client_->Get("/v1/files/nope");
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(StatusFromHttpReply(missing->status, missing->body).message(), "no file nope");
}

TEST_F(HttpTest, StreamDeliversChunksAsTheyAreWritten) {
  std::string received;
  Status s = client_->GetStream("/v1/stream", [&](std::string_view chunk) {
    received += chunk;
    if (received.find("first\n") != std::string::npos) client_saw_first_ = true;
    return Status::Ok();
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(first_delivered_early_.load());
  std::string expected = "first\n";
  for (int i = 0; i < 100; ++i) expected += "line " + std::to_string(i) + "\n";
  EXPECT_EQ(received, expected);
}

TEST_F(HttpTest, StreamAbortedByProducerIsATransportError) {
  std::string received;
  Status s = client_->GetStream("/v1/stream-broken", [&](std::string_view chunk) {
    received += chunk;
    return Status::Ok();
  });
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
}

TEST_F(HttpTest, StreamCallbackErrorStopsTheTransfer) {
  client_saw_first_ = true;  // let the producer run straight through
  int calls = 0;
  Status s = client_->GetStream("/v1/stream", [&](std::string_view) {
    ++calls;
    return Status::Corruption("bad line");
  });
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_EQ(calls, 1);
}

TEST_F(HttpTest, StreamErrorsBeforeTheBodyAreJsonErrors) {
  Status compressed =
      client_->GetStream("/v1/stream-text", [](std::string_view) { return Status::Ok(); });
  EXPECT_EQ(compressed.code(), Code::kInternal);
  EXPECT_NE(compressed.message().find("would be gzipped"), std::string::npos);

  Status denied =
      MakeClient("")->GetStream("/v1/stream", [](std::string_view) { return Status::Ok(); });
  EXPECT_EQ(denied.code(), Code::kUnauthenticated);
}

TEST_F(HttpTest, StopEndsEndlessStreams) {
  std::atomic<int> chunks{0};
  Status stream_status;
  std::thread reader([&] {
    stream_status = client_->GetStream("/v1/stream-forever", [&](std::string_view) {
      ++chunks;
      return Status::Ok();
    });
  });
  auto deadline = Clock::now() + std::chrono::seconds(5);
  while (chunks.load() < 3 && Clock::now() < deadline) std::this_thread::sleep_for(milliseconds(1));
  ASSERT_GE(chunks.load(), 3);
  auto start = Clock::now();
  server_->Stop();
  EXPECT_LT(Clock::now() - start, milliseconds(1000));
  reader.join();
  EXPECT_EQ(stream_status.code(), Code::kUnavailable) << stream_status.ToString();
}

TEST_F(HttpTest, SecondServerOnTheSamePortFailsToBind) {
  HttpServerOptions options;
  options.port = server_->port();
  HttpServer second(options);
  Status s = second.Start();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("bind 127.0.0.1:" + std::to_string(server_->port())),
            std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("in use"), std::string::npos) << s.ToString();
}

TEST_F(HttpTest, StartTwiceFailsAndStopIsIdempotent) {
  EXPECT_EQ(server_->Start().code(), Code::kFailedPrecondition);
  server_->Stop();
  server_->Stop();
  Result<Json> r = client_->GetJson("/v1/ping");
  EXPECT_EQ(r.status().code(), Code::kUnavailable) << r.status().ToString();
}

TEST(HttpServer, BadRoutePatternFailsStart) {
  for (const char* pattern : {"v1/x", "/v1/:", "/v1/*rest/more", "/v1/:a/:a", "/v1/:bad-name"}) {
    HttpServer server(HttpServerOptions{});
    server.HandleJson(HttpMethod::kGet, pattern,
                      [](const HttpRequest&) -> Result<Json> { return Json(); });
    Status s = server.Start();
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << pattern;
    EXPECT_NE(s.message().find(pattern), std::string::npos) << s.message();
  }
}

TEST(HttpServer, WithoutTokenEveryoneIsServedAndPatternsAreLiteral) {
  HttpServer server(HttpServerOptions{});
  server.HandleJson(HttpMethod::kGet, "/v1/a.b", [](const HttpRequest&) -> Result<Json> {
    return Json{{"ok", 1}};
  });
  ASSERT_TRUE(server.Start().ok());
  HttpClientOptions options;
  options.base_url = server.base_url();
  HttpClient client = HttpClient::Create(options).value();
  EXPECT_TRUE(client.GetJson("/v1/a.b").ok());
  // '.' in a pattern is a literal dot, not "any character".
  EXPECT_EQ(client.GetJson("/v1/aXb").status().code(), Code::kNotFound);
}

// With refuse_when_busy, a connection that finds every worker holding one
// is answered 429 at once (not queued), and is served again once a worker
// is free.
TEST(HttpServer, RefuseWhenBusyAnswers429WhileEveryWorkerIsHeld) {
  HttpServerOptions options;
  options.worker_threads = 1;
  options.refuse_when_busy = true;
  HttpServer server(options);
  std::atomic<bool> entered{false}, release{false};
  server.HandleJson(HttpMethod::kGet, "/hold", [&](const HttpRequest&) -> Result<Json> {
    entered = true;
    while (!release) std::this_thread::sleep_for(milliseconds(5));
    return Json{{"held", true}};
  });
  server.HandleJson(HttpMethod::kGet, "/ping", [](const HttpRequest&) -> Result<Json> {
    return Json{{"ok", true}};
  });
  ASSERT_TRUE(server.Start().ok());

  RawConnection holder(server.port());
  ASSERT_TRUE(holder.connected());
  ASSERT_TRUE(holder.Send("GET /hold HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (!entered && Clock::now() < deadline) std::this_thread::sleep_for(milliseconds(5));
  ASSERT_TRUE(entered);

  RawConnection refused(server.port());
  ASSERT_TRUE(refused.connected());
  ASSERT_TRUE(refused.Send("GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"));
  const std::string reply = refused.ReadResponse();
  EXPECT_NE(reply.find("HTTP/1.1 429"), std::string::npos) << reply;
  EXPECT_NE(reply.find("Connection: close"), std::string::npos) << reply;
  EXPECT_NE(reply.find("resource_exhausted"), std::string::npos) << reply;

  release = true;
  EXPECT_NE(holder.ReadResponse().find("HTTP/1.1 200"), std::string::npos);
  HttpClientOptions client_options;
  client_options.base_url = server.base_url();
  HttpClient client = HttpClient::Create(client_options).value();
  Result<Json> pong = Status::Unavailable("not tried");
  while (Clock::now() < deadline) {
    pong = client.GetJson("/ping");
    if (pong.ok()) break;
    EXPECT_EQ(pong.status().code(), Code::kResourceExhausted) << pong.status().ToString();
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_TRUE(pong.ok()) << pong.status().ToString();
}

TEST(HttpClient, BaseUrlPrefixIsPrependedToPaths) {
  HttpServer server(HttpServerOptions{});
  server.HandleJson(HttpMethod::kGet, "/api/v1/ping", [](const HttpRequest& req) -> Result<Json> {
    return Json{{"path", req.path}};
  });
  ASSERT_TRUE(server.Start().ok());
  HttpClientOptions options;
  options.base_url = server.base_url() + "/api/";
  HttpClient client = HttpClient::Create(options).value();
  EXPECT_EQ(client.GetJson("/v1/ping").value()["path"], "/api/v1/ping");
  EXPECT_EQ(client.GetJson("v1/ping").status().code(), Code::kInvalidArgument);
}

TEST(HttpClient, RejectsMalformedBaseUrls) {
  for (const char* url :
       {"", "localhost:80", "ftp://host", "http://", "http://host:0", "http://host:99999",
        "http://host:12a", "http://user@host", "http://[::1", "http://host/api?x=1"}) {
    HttpClientOptions options;
    options.base_url = url;
    Result<HttpClient> client = HttpClient::Create(options);
    EXPECT_EQ(client.status().code(), Code::kInvalidArgument) << url;
  }
  for (const char* url : {"http://127.0.0.1:8080", "https://example.org", "http://[::1]:9000/x"}) {
    HttpClientOptions options;
    options.base_url = url;
    EXPECT_TRUE(HttpClient::Create(options).ok()) << url;
  }
}

TEST(HttpClient, ConnectionRefusedIsUnavailable) {
  // Bind a port, then close it, so nothing listens there.
  int port;
  {
    HttpServer server(HttpServerOptions{});
    ASSERT_TRUE(server.Start().ok());
    port = server.port();
  }
  HttpClientOptions options;
  options.base_url = "http://127.0.0.1:" + std::to_string(port);
  HttpClient client = HttpClient::Create(options).value();
  Result<Json> r = client.GetJson("/v1/ping");
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_NE(r.status().message().find("GET http://127.0.0.1:" + std::to_string(port) + "/v1/ping"),
            std::string::npos)
      << r.status().message();
}

class HttpTokenFile : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "token_test.XXXXXX").string();
    dir_ = ::mkdtemp(tmpl.data());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& content, mode_t mode = 0600) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << content;
    ::chmod(path.c_str(), mode);
    return path;
  }
  std::string dir_;
};

TEST_F(HttpTokenFile, TrimsWhitespace) {
  Result<std::string> token = LoadTokenFile(Write("t", "  abc.DEF-123\n\n"));
  ASSERT_TRUE(token.ok()) << token.status().ToString();
  EXPECT_EQ(*token, "abc.DEF-123");
}

TEST_F(HttpTokenFile, GroupReadableFileIsAcceptedWithAWarning) {
  Result<std::string> token = LoadTokenFile(Write("t", "tok\n", 0644));
  ASSERT_TRUE(token.ok());
  EXPECT_EQ(*token, "tok");
}

TEST_F(HttpTokenFile, RejectsEmptyOddAndMissingFiles) {
  Result<std::string> empty = LoadTokenFile(Write("e", " \n\t\n"));
  EXPECT_EQ(empty.status().code(), Code::kInvalidArgument);
  EXPECT_NE(empty.status().message().find("token file is empty"), std::string::npos);

  EXPECT_EQ(LoadTokenFile(Write("s", "two words\n")).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(LoadTokenFile(Write("b", std::string(5000, 'a'))).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(LoadTokenFile(dir_).status().code(), Code::kInvalidArgument);

  Result<std::string> missing = LoadTokenFile(dir_ + "/none");
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_NE(missing.status().message().find("open " + dir_ + "/none"), std::string::npos);
}

TEST_F(HttpTokenFile, ListsOneTokenALineAndRefusesRepeatsAndBadLines) {
  Result<std::vector<std::string>> keys = LoadTokenFileLines(Write("k", "alice\n\n  bob  \ncarol"));
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  EXPECT_EQ(*keys, (std::vector<std::string>{"alice", "bob", "carol"}));
  EXPECT_EQ(LoadTokenFileLines(Write("r", "alice\nalice\n")).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(LoadTokenFileLines(Write("w", "alice\ntwo words\n")).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(LoadTokenFileLines(Write("e", "\n \n")).status().code(), Code::kInvalidArgument);
  // The one-token reader still takes one alone.
  EXPECT_EQ(LoadTokenFile(Write("two", "alice\nbob\n")).status().code(), Code::kInvalidArgument);
}

TEST(HttpClientPortTest, PortsOneTo65535AreValidAndNoOthers) {
  for (const char* url : {"http://127.0.0.1:1", "http://127.0.0.1:65535"}) {
    HttpClientOptions options;
    options.base_url = url;
    EXPECT_TRUE(HttpClient::Create(options).ok()) << url;
  }
  for (const char* url : {"http://127.0.0.1:0", "http://127.0.0.1:65536"}) {
    HttpClientOptions options;
    options.base_url = url;
    EXPECT_FALSE(HttpClient::Create(options).ok()) << url;
  }
}

}  // namespace
}  // namespace flashroll

