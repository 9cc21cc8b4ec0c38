// HttpServer credentials: named bearer tokens with scopes, and routes that
// need one (common/http.h).
#include <gtest/gtest.h>

#include <atomic>
#include <string>

#include "common/http.h"

namespace flashroll {
namespace {

class HttpScopesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpServerOptions options;
    options.credentials = {{"runner", "runner-token", {"exec"}}, {"ops", "ops-token", {"admin", "exec"}}};
    options.bearer_token = "legacy-token";
    server_ = std::make_unique<HttpServer>(options);
    server_->HandleJson(
        HttpMethod::kPost, "/admin/:thing",
        [this](const HttpRequest& request) -> Result<Json> {
          ++calls_;
          return Json{{"thing", request.Param("thing")}};
        },
        200, "admin");
    server_->HandleRaw(
        HttpMethod::kGet, "/open", [](const HttpRequest&) -> Result<HttpResponse> {
          HttpResponse reply;
          reply.body = "open";
          return reply;
        });
    server_->HandleStream(
        HttpMethod::kPost, "/stream",
        [this](const HttpRequest&) -> Result<StreamResponse> {
          ++calls_;
          StreamResponse reply;
          reply.produce = [](ChunkWriter&) { return Status::Ok(); };
          return reply;
        },
        "admin");
    ASSERT_TRUE(server_->Start().ok());
  }

  HttpClient Client(const std::string& token) {
    HttpClientOptions options;
    options.base_url = server_->base_url();
    options.bearer_token = token;
    auto client = HttpClient::Create(options);
    EXPECT_TRUE(client.ok());
    return *client;
  }

  std::unique_ptr<HttpServer> server_;
  std::atomic<int> calls_{0};
};

TEST_F(HttpScopesTest, ATokenWithoutTheScopeIs403NamingIt) {
  auto reply = Client("runner-token").Send(HttpMethod::kPost, "/admin/x", "{}", "application/json");
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->status, 403) << reply->body;
  const Status status = StatusFromHttpReply(reply->status, reply->body);
  EXPECT_EQ(status.code(), Code::kPermissionDenied);
  EXPECT_NE(status.message().find("token \"runner\" lacks the scope \"admin\" that POST /admin/:thing needs"),
            std::string::npos)
      << status.ToString();
  EXPECT_EQ(calls_, 0);  // the handler never ran
}

TEST_F(HttpScopesTest, AStreamedRouteNeedsItsScopeToo) {
  auto reply = Client("runner-token").Send(HttpMethod::kPost, "/stream", "{}", "application/json");
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->status, 403) << reply->body;
  EXPECT_EQ(calls_, 0);
}

TEST_F(HttpScopesTest, ATokenWithTheScopeReachesTheHandler) {
  auto reply = Client("ops-token").PostJson("/admin/x", Json::object());
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ((*reply)["thing"], "x");
  EXPECT_EQ(calls_, 1);
}

TEST_F(HttpScopesTest, ThePlainBearerTokenHoldsEveryScope) {
  auto reply = Client("legacy-token").PostJson("/admin/y", Json::object());
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ((*reply)["thing"], "y");
}

TEST_F(HttpScopesTest, UnknownTokensAre401AndRoutesWithoutAScopeTakeAnyToken) {
  auto unknown = Client("ops-token-but-longer").Send(HttpMethod::kGet, "/open");
  ASSERT_TRUE(unknown.ok());
  EXPECT_EQ(unknown->status, 401);
  // A prefix of a real token is no token either.
  auto prefix = Client("ops-tok").Send(HttpMethod::kGet, "/open");
  ASSERT_TRUE(prefix.ok());
  EXPECT_EQ(prefix->status, 401);
  auto open = Client("runner-token").Send(HttpMethod::kGet, "/open");
  ASSERT_TRUE(open.ok());
  EXPECT_EQ(open->status, 200);
  EXPECT_EQ(open->body, "open");
}

}  // namespace
}  // namespace flashroll
