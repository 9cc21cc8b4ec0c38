// The node API (a real SandboxServer over a real Manager) under hostile
// clients: slowloris sockets and unauthenticated bodies from other loopback
// addresses while an authenticated client creates and execs, an exec
// without a timeout, and execs asking past the node's maxima. Needs root
// (skips otherwise).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <regex>

#include "common/http.h"
#include "sandbox/api/policy.h"
#include "sandbox/api/server.h"

namespace flashroll::sandbox::api {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr char kNodeHostileToken[] = "node-hostile-token";

// A TCP connection to 127.0.0.1:port from loopback address `source`.
int ConnectFrom(int port, const char* source) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in local{};
  local.sin_family = AF_INET;
  ::inet_pton(AF_INET, source, &local.sin_addr);
  ::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  return fd;
}

class NodeApiHostileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "sandbox API tests need root";
    auto manager = Manager::Open();
    ASSERT_TRUE(manager.ok()) << manager.status().ToString();
    manager_ = std::move(*manager);
  }
  void TearDown() override {
    if (server_) server_->Stop();
    for (const std::string& id : manager_ ? manager_->List() : std::vector<std::string>{}) {
      (void)manager_->Destroy(id);
    }
  }

  // The options `flashroll sandboxd` serves with (sandbox/commands.cc).
  void Start(NodePolicy policy = NodePolicy()) {
    HttpServerOptions options;
    options.bearer_token = kNodeHostileToken;
    const std::vector<std::string> all = {kScopeCreate, kScopeExec, kScopeFiles, kScopeAdmin};
    options.credentials = {{"alice", "alice-token", {kScopeCreate, kScopeExec, kScopeFiles}},
                           {"bob", "bob-token", {kScopeCreate, kScopeExec, kScopeFiles}},
                           {"ops", "ops-token", all}};
    options.worker_threads = 64;
    options.max_unauthenticated_per_peer = 16;
    options.max_unauthenticated = 32;
    server_ = std::make_unique<SandboxServer>(manager_.get(), std::move(policy), options);
    ASSERT_TRUE(server_->Start().ok());
    HttpClientOptions client;
    client.base_url = server_->base_url();
    client.bearer_token = kNodeHostileToken;
    client_ = std::make_unique<HttpClient>(HttpClient::Create(client).value());
  }

  std::string Create() {
    Result<Json> created = client_->PostJson("/v1/sandboxes", Json::object());
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    return created.ok() ? (*created)["id"].get<std::string>() : "";
  }

  HttpClient As(const std::string& token) {
    HttpClientOptions client;
    client.base_url = server_->base_url();
    client.bearer_token = token;
    return HttpClient::Create(client).value();
  }

  std::unique_ptr<Manager> manager_;
  std::unique_ptr<SandboxServer> server_;
  std::unique_ptr<HttpClient> client_;
};

// 200 slowloris sockets and three threads posting bodies without a token,
// from two addresses; the authenticated client's create and exec keep
// answering. On the old server the sockets held every worker.
TEST_F(NodeApiHostileTest, FloodKeepsAnsweringAnAuthenticatedClient) {
  Start();
  const std::string id = Create();
  ASSERT_FALSE(id.empty());
  std::atomic<bool> done{false};
  std::vector<std::thread> attackers;
  std::vector<int> sockets;
  for (int i = 0; i < 200; ++i) sockets.push_back(ConnectFrom(server_->port(), "127.0.0.2"));
  attackers.emplace_back([&] {
    while (!done.load()) {
      for (int fd : sockets) (void)::send(fd, "x", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      std::this_thread::sleep_for(milliseconds(20));
    }
  });
  for (int i = 0; i < 3; ++i) {
    attackers.emplace_back([&] {
      const std::string request = "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n" +
                                  std::string(64 * 1024, '[');
      while (!done.load()) {
        const int fd = ConnectFrom(server_->port(), "127.0.0.3");
        (void)::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
        ::close(fd);
      }
    });
  }
  std::this_thread::sleep_for(milliseconds(300));
  std::vector<double> took;
  const Json exec = {{"cmd", {"/bin/true"}}};
  for (int i = 0; i < 50; ++i) {
    // A new connection each time: one kept from before the attack would
    // not need a worker the attacker holds.
    HttpClient fresh = As(kNodeHostileToken);
    const auto start = Clock::now();
    Result<Json> result = fresh.PostJson("/v1/sandboxes/" + id + "/exec", exec);
    took.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    EXPECT_TRUE(result.ok()) << result.status().ToString();
  }
  HttpClientOptions anonymous;
  anonymous.base_url = server_->base_url();
  Result<Json> health = HttpClient::Create(anonymous).value().GetJson("/health");
  done = true;
  for (std::thread& t : attackers) t.join();
  for (int fd : sockets) ::close(fd);
  std::sort(took.begin(), took.end());
  std::printf("node flood: authenticated exec p50 %.2f ms, max %.2f ms\n", took[took.size() / 2], took.back());
  ASSERT_TRUE(health.ok()) << health.status().ToString();
  EXPECT_LT(took.back(), 1000.0);
}

// An exec that names no timeout gets the node's default: it cannot hold a
// worker (and the sandbox) longer.
TEST_F(NodeApiHostileTest, ExecWithoutATimeoutGetsTheNodeDefault) {
  NodePolicy policy;
  policy.exec.default_timeout = milliseconds(500);
  Start(policy);
  const std::string id = Create();
  const auto start = Clock::now();
  Result<Json> result = client_->PostJson("/v1/sandboxes/" + id + "/exec", Json{{"cmd", {"/bin/sleep", "30"}}});
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ((*result)["timed_out"], true) << result->dump();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
}

TEST_F(NodeApiHostileTest, ExecPastTheNodeMaximaIs403NamingTheField) {
  NodePolicy policy;
  policy.exec.max_timeout = std::chrono::seconds(60);
  policy.exec.max_output_bytes = 1 << 20;
  Start(policy);
  const std::string id = Create();
  Result<Json> slow = client_->PostJson("/v1/sandboxes/" + id + "/exec", Json{{"cmd", {"/bin/true"}}, {"timeout", "2h"}});
  EXPECT_EQ(slow.status().code(), Code::kPermissionDenied);
  EXPECT_NE(slow.status().message().find("body.timeout: 2h is above this node's maximum of 1m"), std::string::npos)
      << slow.status().ToString();
  Result<Json> big = client_->PostJson("/v1/sandboxes/" + id + "/exec/stream",
                                       Json{{"cmd", {"/bin/true"}}, {"max_output_bytes", 1 << 30}});
  EXPECT_EQ(big.status().code(), Code::kPermissionDenied);
  EXPECT_NE(big.status().message().find("body.max_output_bytes: 1G is above this node's maximum of 1M"),
            std::string::npos)
      << big.status().ToString();
}

// Bob, another client of the node, tries every route on Alice's sandbox;
// the operator's token (every scope) tries to drive it. Before, ids were
// fr-<pid>-<start>-<n> and any token with the scope drove any sandbox.
TEST_F(NodeApiHostileTest, AnotherClientGets404OnEveryRouteAndAdminOnlyListsAndDeletes) {
  Start();
  HttpClient alice = As("alice-token");
  Result<Json> created = alice.PostJson("/v1/sandboxes", Json::object());
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  const std::string id = (*created)["id"];
  EXPECT_TRUE(std::regex_match(id, std::regex("sb-[0-9a-f]{32}"))) << id;
  const std::string base = "/v1/sandboxes/" + id;
  struct Route {
    HttpMethod method;
    std::string path;
    std::string body;
  };
  const Route driving[] = {
      {HttpMethod::kPost, base + "/exec", R"({"cmd": ["/bin/true"]})"},
      {HttpMethod::kPost, base + "/exec/stream", R"({"cmd": ["/bin/true"]})"},
      {HttpMethod::kPost, base + "/signal", R"({"signal": "SIGTERM"})"},
      {HttpMethod::kPost, base + "/freeze", ""},
      {HttpMethod::kPost, base + "/thaw", ""},
      {HttpMethod::kGet, base + "/events", ""},
      {HttpMethod::kPut, base + "/files?path=/tmp/x", "x"},
      {HttpMethod::kGet, base + "/files?path=/etc/hostname", ""},
  };
  for (const char* token : {"bob-token", "ops-token"}) {
    for (const Route& route : driving) {
      Result<HttpResponse> reply = As(token).Send(route.method, route.path, route.body, "application/json");
      ASSERT_TRUE(reply.ok());
      EXPECT_EQ(reply->status, 404) << token << " " << route.path << ": " << reply->body;
    }
  }
  Result<HttpResponse> bob_delete = As("bob-token").Send(HttpMethod::kDelete, base);
  ASSERT_TRUE(bob_delete.ok());
  EXPECT_EQ(bob_delete->status, 404) << bob_delete->body;
  // Lists: Bob sees none, Alice hers, the operator every one with its owner.
  EXPECT_EQ((*As("bob-token").GetJson("/v1/sandboxes"))["sandboxes"].size(), 0u);
  EXPECT_EQ((*alice.GetJson("/v1/sandboxes"))["sandboxes"][0]["id"], id);
  const Json every = *As("ops-token").GetJson("/v1/sandboxes");
  ASSERT_EQ(every["sandboxes"].size(), 1u);
  EXPECT_EQ(every["sandboxes"][0]["owner"], "alice");
  // Alice still drives it; the operator may delete it.
  EXPECT_TRUE(alice.PostJson(base + "/exec", Json{{"cmd", {"/bin/true"}}}).ok());
  EXPECT_TRUE(As("ops-token").DeleteJson(base).ok());
  EXPECT_TRUE(manager_->List().empty());
}

// Bob reuses Alice's idempotency key: he gets a sandbox of his own, not
// hers. Alice reusing her key for another spec is 409.
TEST_F(NodeApiHostileTest, IdempotencyKeysArePerClientAndAReuseWithAnotherSpecIs409) {
  Start();
  HttpClient alice = As("alice-token");
  HttpClient bob = As("bob-token");
  const std::string path = "/v1/sandboxes?client_key=job-7";
  Result<Json> first = alice.PostJson(path, Json{{"memory", "256M"}});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  Result<Json> again = alice.PostJson(path, Json{{"memory", "256M"}});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*again)["id"], (*first)["id"]);
  Result<Json> bobs = bob.PostJson(path, Json{{"memory", "256M"}});
  ASSERT_TRUE(bobs.ok()) << bobs.status().ToString();
  EXPECT_NE((*bobs)["id"], (*first)["id"]);
  EXPECT_EQ(manager_->List().size(), 2u);
  Result<HttpResponse> other = alice.Post(path, R"({"memory": "512M"})", "application/json");
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->status, 409) << other->body;
  EXPECT_NE(other->body.find("was used for a different spec"), std::string::npos) << other->body;
}

// One create asking for thousands of egress rules would fill the network
// policy map every sandbox of the node shares; 0.0.0.0/0 would reach the
// node's own services. Both are refused before anything is created.
TEST_F(NodeApiHostileTest, EgressRulesAreBoundedAndNeverReachTheNode) {
  Start();
  Json many = Json::array();
  for (int i = 0; i < 1000; ++i) many.push_back("203.0.113." + std::to_string(i % 250) + ":" + std::to_string(1 + i));
  Result<Json> flood = client_->PostJson("/v1/sandboxes", Json{{"net", "policy"}, {"allow", many}});
  EXPECT_EQ(flood.status().code(), Code::kPermissionDenied);
  EXPECT_NE(flood.status().message().find("body.allow: 1000 rules, above this node's maximum of 64"),
            std::string::npos)
      << flood.status().ToString();
  Result<Json> everywhere = client_->PostJson("/v1/sandboxes", Json{{"net", "policy"}, {"allow", {"0.0.0.0/0:*"}}});
  EXPECT_EQ(everywhere.status().code(), Code::kPermissionDenied);
  EXPECT_NE(everywhere.status().message().find("body.allow[0]: 0.0.0.0/0:* reaches"), std::string::npos)
      << everywhere.status().ToString();
  Result<Json> metadata =
      client_->PostJson("/v1/sandboxes", Json{{"net", "policy"}, {"allow", {"169.254.0.0/16:80"}}});
  EXPECT_EQ(metadata.status().code(), Code::kPermissionDenied) << metadata.status().ToString();
  EXPECT_TRUE(manager_->List().empty());
  // A rule to somewhere else is admitted.
  SpecRequest request;
  request.spec.net = NetMode::kPolicy;
  Result<AllowRule> rule = ParseAllowRule("203.0.113.7:443");
  ASSERT_TRUE(rule.ok());
  request.spec.allow.push_back(*rule);
  Result<SandboxSpec> admitted = AdmitSpec(NodePolicy(), request, "body");
  EXPECT_TRUE(admitted.ok()) << admitted.status().ToString();
}

}  // namespace
}  // namespace flashroll::sandbox::api
