// The confined node API over a real SandboxServer and HTTP client: tokens
// with scopes per route, creates outside the node's policy refused with 403
// naming the field and leaving nothing behind, and what the policy allows
// (a workspace bind, a named image, the default limits) working in a real
// sandbox. Needs root (skips otherwise).
#include <sys/stat.h>

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/http.h"
#include "sandbox/api/server.h"
#include "sandbox/image.h"
#include "sandbox/image_store.h"
#include "tests/sandbox/sandbox_fixture.h"

namespace flashroll::sandbox::api {
namespace {

namespace fs = std::filesystem;

class ApiPolicyTest : public SandboxFixture {
 protected:
  void SetUp() override {
    SandboxFixture::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    char dir[] = "/tmp/flashroll-api-policy-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
    fs::create_directories(dir_ + "/ws/job1");
    fs::create_directory_symlink("/etc", dir_ + "/ws/job1/etc");
    policy_.workspace_root = dir_ + "/ws";
  }
  void TearDown() override {
    if (server_) server_->Stop();
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  void StartServer() {
    HttpServerOptions options;
    options.credentials = {{"all", "all-token", AllScopes()},
                           {"create-only", "create-token", {kScopeCreate}},
                           {"exec-only", "exec-token", {kScopeExec}},
                           {"files-only", "files-token", {kScopeFiles}},
                           {"admin-only", "admin-token", {kScopeAdmin}},
                           {"job1-busybox", "job1-token", {kScopeCreate, kScopeExec, "image:busybox", "workspace:job1"}}};
    server_ = std::make_unique<SandboxServer>(manager_.get(), policy_, options);
    ASSERT_TRUE(server_->Start().ok());
  }

  std::string Internal(const std::string& id) {
    Result<std::string> internal = server_->ManagerId(id);
    return internal.ok() ? *internal : id;
  }
  static std::vector<std::string> AllScopes() { return {kScopeCreate, kScopeExec, kScopeFiles, kScopeAdmin}; }

  HttpClient Client(const std::string& token) {
    HttpClientOptions options;
    options.base_url = server_->base_url();
    options.bearer_token = token;
    auto client = HttpClient::Create(options);
    EXPECT_TRUE(client.ok());
    return *client;
  }

  // Posts a create as the all-scopes token and expects 403 naming `field`.
  void ExpectRefused(const std::string& body, const std::string& field, const std::string& needle = "") {
    auto reply = Client("all-token").Send(HttpMethod::kPost, "/v1/sandboxes", body, "application/json");
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    EXPECT_EQ(reply->status, 403) << body << ": " << reply->body;
    const Status status = StatusFromHttpReply(reply->status, reply->body);
    EXPECT_EQ(status.message().rfind(field + ": ", 0), 0u) << status.ToString();
    EXPECT_NE(status.message().find(needle), std::string::npos) << status.ToString();
    EXPECT_TRUE(manager_->List().empty()) << body;
  }

  std::string Create(const std::string& body) {
    auto reply = Client("all-token").Send(HttpMethod::kPost, "/v1/sandboxes", body, "application/json");
    EXPECT_TRUE(reply.ok()) << body << ": " << reply.status().ToString();
    if (!reply.ok()) return "";
    EXPECT_EQ(reply->status, 201) << body << ": " << reply->body;
    auto json = ParseJson(reply->body);
    return json.ok() ? json->value("id", "") : "";
  }

  ExecResult Exec(const std::string& id, const std::string& script) {
    auto reply = Client("all-token").PostJson("/v1/sandboxes/" + id + "/exec",
                                              Json{{"cmd", {"/bin/sh", "-c", script}}});
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
    if (!reply.ok()) return {};
    auto result = ExecResultFromJson(JsonView(*reply, "reply"));
    EXPECT_TRUE(result.ok());
    return result.ok() ? *result : ExecResult{};
  }

  std::string dir_;
  NodePolicy policy_;
  std::unique_ptr<SandboxServer> server_;
};

TEST_F(ApiPolicyTest, HostPathsAsImagesAreRefused) {
  StartServer();
  ExpectRefused(R"({"image": "/"})", "body.image", "is a path");
  ExpectRefused(R"({"image": "/var/lib/flashroll/images/busybox"})", "body.image", "is a path");
  ExpectRefused(R"({"image": "debian"})", "body.image", "unknown image");
}

TEST_F(ApiPolicyTest, BindsOutsideTheWorkspaceRootAreRefused) {
  StartServer();
  ExpectRefused(R"({"rw_paths": ["/etc"]})", "body.rw_paths[0]", "not beneath the workspace root");
  ExpectRefused(Json{{"rw_paths", {dir_ + "/ws/../ws/job1/../../"}}}.dump(), "body.rw_paths[0]");
  ExpectRefused(Json{{"rw_paths", {dir_ + "/ws/job1/etc"}}}.dump(), "body.rw_paths[0]", "symlink on the way");
  ExpectRefused(Json{{"rw_paths", {dir_ + "/ws"}}}.dump(), "body.rw_paths[0]");
}

TEST_F(ApiPolicyTest, SeccompPathsAndUnknownNamesAreRefused) {
  StartServer();
  ExpectRefused(R"({"seccomp": "/etc/passwd"})", "body.seccomp", "is a path");
  ExpectRefused(R"({"seccomp": "../default"})", "body.seccomp", "is a path");
  ExpectRefused(R"({"seccomp": "permissive"})", "body.seccomp", "unknown seccomp profile");
}

TEST_F(ApiPolicyTest, LimitsAboveTheMaximumAreRefused) {
  StartServer();
  ExpectRefused(R"({"memory": "64G"})", "body.memory", "maximum of 4G");
  ExpectRefused(R"({"pids": 100000})", "body.pids", "maximum of 4096");
  ExpectRefused(R"({"cpus": 64})", "body.cpus", "maximum of 4");
  ExpectRefused(R"({"disk": "100G"})", "body.disk", "maximum of 4G");
}

TEST_F(ApiPolicyTest, WithoutAWorkspaceRootNoHostPathIsBound) {
  policy_.workspace_root.clear();
  StartServer();
  ExpectRefused(Json{{"rw_paths", {dir_ + "/ws/job1"}}}.dump(), "body.rw_paths[0]", "no workspace_root");
}

TEST_F(ApiPolicyTest, AWorkspaceBindAndTheDefaultLimitsApply) {
  // Root inside is the sandbox's own host id range, not the host's root:
  // a workspace directory must let that range write.
  ASSERT_EQ(::chmod((dir_ + "/ws/job1").c_str(), 0777), 0);
  StartServer();
  const std::string id = Create(Json{{"rw_paths", {dir_ + "/ws/job1/../job1"}}}.dump());
  ASSERT_FALSE(id.empty());
  const ExecResult result = Exec(id, "echo made > " + dir_ + "/ws/job1/out && echo ok");
  EXPECT_EQ(result.stdout_data, "ok\n") << result.stderr_data;
  EXPECT_EQ(ReadHostFile(dir_ + "/ws/job1/out"), "made\n");
  // A create without limits gets the node's defaults.
  std::string pids_max;
  for (const auto& cgroup : CgroupDirsWithPrefix(Internal(id))) {
    if (::access((cgroup + "/pids.max").c_str(), R_OK) == 0) pids_max = ReadHostFile(cgroup + "/pids.max");
  }
  EXPECT_EQ(pids_max, std::to_string(NodePolicy().defaults.pids) + "\n");
  ASSERT_TRUE(manager_->Destroy(Internal(id)).ok());
}

// The attacker's steps: PUT a file with mode 4755 into the workspace
// bind, then find a set-uid file on the host. The files API refuses the
// set-uid and set-gid bits (400 naming the mode) and writes nothing.
TEST_F(ApiPolicyTest, SetIdModesAreRefusedThroughTheFilesApi) {
  ASSERT_EQ(::chmod((dir_ + "/ws/job1").c_str(), 0777), 0);
  StartServer();
  const std::string id = Create(Json{{"rw_paths", {dir_ + "/ws/job1"}}}.dump());
  ASSERT_FALSE(id.empty());
  for (const char* mode : {"4755", "2755", "6777"}) {
    const std::string file = dir_ + "/ws/job1/setid-" + mode;
    auto reply = Client("all-token").Send(HttpMethod::kPut,
                                          "/v1/sandboxes/" + id + "/files?path=" + file + "&mode=" + mode,
                                          "#!/bin/sh\nid\n", "application/octet-stream");
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    EXPECT_EQ(reply->status, 400) << mode << ": " << reply->body;
    EXPECT_NE(reply->body.find(std::string("mode ") + mode + " has the set-uid or set-gid bit"), std::string::npos)
        << reply->body;
    EXPECT_FALSE(fs::exists(file)) << mode;
  }
  // The plain modes still work.
  auto plain = Client("all-token").Send(HttpMethod::kPut,
                                        "/v1/sandboxes/" + id + "/files?path=" + dir_ + "/ws/job1/run&mode=1755",
                                        "x", "application/octet-stream");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->status, 200) << plain->body;
  ASSERT_TRUE(manager_->Destroy(Internal(id)).ok());
}

TEST_F(ApiPolicyTest, AnImportedImageIsServedByName) {
  // The busybox tree, built by a first busybox sandbox, imported as "bb".
  ASSERT_TRUE(manager_->Destroy(CreateOrDie([] {
                SandboxSpec spec;
                spec.image = ImageKind::kBusybox;
                return spec;
              }()))
                  .ok());
  ASSERT_TRUE(ImportImage(dir_ + "/store", kBusyboxImageDir, "bb").ok());
  auto tree = StoredImage(dir_ + "/store", "bb");
  ASSERT_TRUE(tree.ok()) << tree.status().ToString();
  policy_.images["bb"] = {*tree, {}};
  StartServer();
  const std::string id = Create(R"({"image": "bb"})");
  ASSERT_FALSE(id.empty());
  // busybox's sh, and no host /usr: the image is the imported tree.
  const ExecResult result = Exec(id, "test -e /usr/bin/python3 || echo only-busybox");
  EXPECT_EQ(result.stdout_data, "only-busybox\n") << result.stderr_data;
  ASSERT_TRUE(manager_->Destroy(Internal(id)).ok());
}

// A token whose scopes name an image and a workspace (issue 27 item 2)
// gets 403 for any other, and nothing is created; with them it works.
TEST_F(ApiPolicyTest, ATokenForOneImageAndWorkspaceGetsNoOther) {
  fs::create_directories(dir_ + "/ws/job2");
  fs::create_directories(dir_ + "/ws/job10");
  StartServer();
  auto post = [&](const std::string& body) {
    auto reply = Client("job1-token").Send(HttpMethod::kPost, "/v1/sandboxes", body, "application/json");
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
    return reply.ok() ? *reply : HttpResponse{};
  };
  const std::string ws = dir_ + "/ws";
  struct Refused {
    std::string body;
    std::string field;
  };
  for (const Refused& r : std::vector<Refused>{
           {R"({"image": "host"})", "body.image"},
           {R"({})", "body.image"},  // the default image is host
           {R"({"image": "busybox", "rw_paths": [")" + ws + R"(/job2"]})", "body.rw_paths[0]"},
           {R"({"image": "busybox", "rw_paths": [")" + ws + R"(/job10"]})", "body.rw_paths[0]"},
           {R"({"image": "busybox", "rw_paths": [")" + ws + R"(/job1/../job2"]})", "body.rw_paths[0]"}}) {
    const HttpResponse reply = post(r.body);
    EXPECT_EQ(reply.status, 403) << r.body << ": " << reply.body;
    EXPECT_EQ(StatusFromHttpReply(reply.status, reply.body).message().rfind(r.field + ": ", 0), 0u) << reply.body;
  }
  EXPECT_TRUE(manager_->List().empty());
  const HttpResponse ok = post(R"({"image": "busybox", "rw_paths": [")" + ws + R"(/job1"]})");
  EXPECT_EQ(ok.status, 201) << ok.body;
  EXPECT_EQ(manager_->List().size(), 1u);
  // The all-scopes token is not confined.
  const std::string id = Create(R"({"image": "host", "rw_paths": [")" + ws + R"(/job2"]})");
  EXPECT_FALSE(id.empty());
  for (const std::string& sandbox : manager_->List()) ASSERT_TRUE(manager_->Destroy(sandbox).ok());
}

TEST_F(ApiPolicyTest, EachRouteNeedsItsScope) {
  StartServer();
  const std::string id = Create("{}");
  ASSERT_FALSE(id.empty());
  const std::string base = "/v1/sandboxes/" + id;
  struct Route {
    HttpMethod method;
    std::string path;
    std::string body;
    const char* scope;
  };
  const Route routes[] = {
      {HttpMethod::kPost, "/v1/sandboxes", "{}", kScopeCreate},
      {HttpMethod::kPost, base + "/exec", R"({"cmd": ["/bin/true"]})", kScopeExec},
      {HttpMethod::kPost, base + "/exec/stream", R"({"cmd": ["/bin/true"]})", kScopeExec},
      {HttpMethod::kPost, base + "/signal", R"({"signal": "SIGTERM"})", kScopeExec},
      {HttpMethod::kPost, base + "/freeze", "", kScopeExec},
      {HttpMethod::kPost, base + "/thaw", "", kScopeExec},
      {HttpMethod::kGet, base + "/events", "", kScopeExec},
      {HttpMethod::kPut, base + "/files?path=/tmp/x", "x", kScopeFiles},
      {HttpMethod::kGet, base + "/files?path=/etc/hostname", "", kScopeFiles},
      {HttpMethod::kGet, "/metrics", "", kScopeAdmin},
  };
  const std::pair<const char*, const char*> tokens[] = {{kScopeCreate, "create-token"},
                                                       {kScopeExec, "exec-token"},
                                                       {kScopeFiles, "files-token"},
                                                       {kScopeAdmin, "admin-token"}};
  for (const Route& route : routes) {
    const std::string what = std::string(HttpMethodName(route.method)) + " " + route.path;
    for (const auto& [scope, token] : tokens) {
      if (std::string(scope) == route.scope) continue;
      auto reply = Client(token).Send(route.method, route.path, route.body, "application/json");
      ASSERT_TRUE(reply.ok()) << what;
      EXPECT_EQ(reply->status, 403) << what << " with the " << scope << " token: " << reply->body;
      EXPECT_NE(reply->body.find(std::string("lacks the scope \\\"") + route.scope + "\\\""), std::string::npos)
          << what << ": " << reply->body;
    }
    // The token holding the scope gets past authorization (signal finds no
    // exec running: 409).
    const std::string token = std::string(route.scope) + "-token";
    auto reply = Client(token).Send(route.method, route.path, route.body, "application/json");
    ASSERT_TRUE(reply.ok()) << what;
    EXPECT_NE(reply->status, 403) << what << ": " << reply->body;
    EXPECT_NE(reply->status, 401) << what << ": " << reply->body;
  }
  // DELETE takes exec (the owner's) or admin (any sandbox's).
  for (const char* token : {"create-token", "files-token"}) {
    auto reply = Client(token).Send(HttpMethod::kDelete, base, "", "application/json");
    ASSERT_TRUE(reply.ok());
    EXPECT_EQ(reply->status, 403) << token << ": " << reply->body;
    EXPECT_NE(reply->body.find("holds neither the scope exec nor admin"), std::string::npos) << reply->body;
  }
  auto deleted = Client("admin-token").Send(HttpMethod::kDelete, base, "", "application/json");
  ASSERT_TRUE(deleted.ok());
  EXPECT_EQ(deleted->status, 200) << deleted->body;
  EXPECT_EQ(manager_->List().size(), 1u);  // the second create's sandbox; the first was deleted
  for (const auto& left : manager_->List()) ASSERT_TRUE(manager_->Destroy(left).ok());
  auto unknown = Client("no-such-token").Send(HttpMethod::kGet, "/metrics");
  ASSERT_TRUE(unknown.ok());
  EXPECT_EQ(unknown->status, 401);
}

}  // namespace
}  // namespace flashroll::sandbox::api
