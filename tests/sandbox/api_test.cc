// The sandbox API end to end: a real SandboxServer on an ephemeral port
// driven through HttpSandboxClient, and the in-process LocalSandboxService,
// run through the same test list; then the HTTP-only error paths, /metrics
// and the `flashroll sandboxd` binary. Needs root (skips otherwise).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>

#include "common/http.h"
#include "sandbox/api/client.h"
#include "sandbox/api/local_service.h"
#include "sandbox/api/server.h"
#include "sandbox/naming.h"
#include "sandbox/sandbox.h"
#include "tests/sandbox/sandbox_fixture.h"

namespace flashroll::sandbox::api {
namespace {

using std::chrono::milliseconds;

constexpr char kApiToken[] = "test-token-0123456789";

ExecCall Call(std::vector<std::string> argv, milliseconds timeout = milliseconds(30000)) {
  ExecCall call;
  call.argv = std::move(argv);
  call.timeout = timeout;
  return call;
}

// Holds a Manager and, for the HTTP transport, a server in front of it.
class SandboxServiceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "sandbox API tests need root";
    auto manager = Manager::Open();
    ASSERT_TRUE(manager.ok()) << manager.status().ToString();
    manager_ = std::move(*manager);
    if (GetParam() == "local") {
      service_ = std::make_unique<LocalSandboxService>(manager_.get());
      return;
    }
    HttpServerOptions options;
    options.port = 0;
    options.bearer_token = kApiToken;
    options.max_body_bytes = 1 << 20;
    server_ = std::make_unique<SandboxServer>(manager_.get(), NodePolicy(), options);
    ASSERT_TRUE(server_->Start().ok());
    HttpClientOptions client_options;
    client_options.base_url = server_->base_url();
    client_options.bearer_token = kApiToken;
    auto client = HttpSandboxClient::Create(client_options);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    service_ = std::move(*client);
  }

  void TearDown() override {
    service_.reset();
    if (server_) server_->Stop();
  }

  // The Manager's id behind a service id (the same for the local service).
  std::string ManagerId(const std::string& id) {
    if (!server_) return id;
    Result<std::string> internal = server_->ManagerId(id);
    return internal.ok() ? *internal : id;
  }

  std::string CreateOrDie(const SandboxSpec& spec = SandboxSpec(), const std::string& key = "") {
    auto id = service_->Create(spec, key);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return id.ok() ? *id : std::string();
  }

  std::unique_ptr<Manager> manager_;
  std::unique_ptr<SandboxServer> server_;
  std::unique_ptr<SandboxService> service_;
};

TEST_P(SandboxServiceTest, ExecReportsExitCodesAndOutput) {
  const std::string id = CreateOrDie();
  auto ok = service_->Exec(id, Call({"/bin/sh", "-c", "echo out; echo err >&2"}));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->exit_code, 0);
  EXPECT_EQ(ok->stdout_data, "out\n");
  EXPECT_EQ(ok->stderr_data, "err\n");
  EXPECT_FALSE(ok->timed_out);

  auto failed = service_->Exec(id, Call({"/bin/sh", "-c", "exit 3"}));
  ASSERT_TRUE(failed.ok()) << failed.status().ToString();
  EXPECT_EQ(failed->exit_code, 3);

  auto missing = service_->Exec(id, Call({"/no/such/program"}));
  ASSERT_TRUE(missing.ok()) << missing.status().ToString();
  EXPECT_EQ(missing->exit_code, 127);
  EXPECT_NE(missing->start_errno, 0);

  // The sandbox sees its own hostname, not the host's.
  auto hostname = service_->Exec(id, Call({"/bin/hostname"}));
  ASSERT_TRUE(hostname.ok());
  EXPECT_EQ(hostname->stdout_data, "sandbox\n");
  EXPECT_TRUE(service_->Destroy(id).ok());
}

TEST_P(SandboxServiceTest, ExecTimeoutKillsTheCommand) {
  const std::string id = CreateOrDie();
  const auto start = std::chrono::steady_clock::now();
  auto result = service_->Exec(id, Call({"/bin/sleep", "30"}, milliseconds(300)));
  const auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_TRUE(result->timed_out);
  EXPECT_NE(result->exit_code, 0);
  EXPECT_LT(elapsed, std::chrono::seconds(10));
  // The sandbox is still usable afterwards.
  auto after = service_->Exec(id, Call({"/bin/true"}));
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->exit_code, 0);
  EXPECT_TRUE(service_->Destroy(id).ok());
}

TEST_P(SandboxServiceTest, StreamedExecDeliversOutputInOrder) {
  const std::string id = CreateOrDie();
  std::string out, err;
  auto result = service_->ExecStreaming(
      id, Call({"/bin/sh", "-c", "for i in 1 2 3; do echo line$i; done; echo oops >&2; exit 5"}),
      [&](OutputStream stream, std::string_view data) {
        (stream == OutputStream::kStdout ? out : err).append(data);
      });
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->exit_code, 5);
  EXPECT_EQ(out, "line1\nline2\nline3\n");
  EXPECT_EQ(err, "oops\n");
  EXPECT_TRUE(result->stdout_data.empty());
  EXPECT_TRUE(service_->Destroy(id).ok());
}

TEST_P(SandboxServiceTest, FilesRoundTripBinaryData) {
  const std::string id = CreateOrDie();
  std::string data;
  for (int i = 0; i < 70000; ++i) data += static_cast<char>(i * 7 % 256);
  ASSERT_TRUE(service_->PutFile(id, "/tmp/blob.bin", data, 0600).ok());
  auto back = service_->GetFile(id, "/tmp/blob.bin");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, data);
  // The command inside sees the same bytes and mode.
  auto seen = service_->Exec(id, Call({"/bin/sh", "-c", "wc -c < /tmp/blob.bin; stat -c %a /tmp/blob.bin"}));
  ASSERT_TRUE(seen.ok());
  EXPECT_EQ(seen->stdout_data, "70000\n600\n");
  // A file written inside comes back out.
  ASSERT_TRUE(service_->Exec(id, Call({"/bin/sh", "-c", "printf 'made inside' > /tmp/out.txt"})).ok());
  auto made = service_->GetFile(id, "/tmp/out.txt");
  ASSERT_TRUE(made.ok());
  EXPECT_EQ(*made, "made inside");
  EXPECT_EQ(service_->GetFile(id, "/tmp/absent").status().code(), Code::kNotFound);
  EXPECT_TRUE(service_->Destroy(id).ok());
}

TEST_P(SandboxServiceTest, FreezeBlocksExecUntilThaw) {
  const std::string id = CreateOrDie();
  ASSERT_TRUE(service_->Freeze(id).ok());
  EXPECT_EQ(service_->Exec(id, Call({"/bin/true"})).status().code(), Code::kFailedPrecondition);
  ASSERT_TRUE(service_->Thaw(id).ok());
  auto result = service_->Exec(id, Call({"/bin/true"}));
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->exit_code, 0);
  // Destroy works from the frozen state too.
  ASSERT_TRUE(service_->Freeze(id).ok());
  EXPECT_TRUE(service_->Destroy(id).ok());
}

TEST_P(SandboxServiceTest, DestroyRemovesEverything) {
  const std::string id = CreateOrDie();
  EXPECT_FALSE(CgroupDirsWithPrefix(ManagerId(id)).empty());
  ASSERT_TRUE(service_->Destroy(id).ok());
  EXPECT_TRUE(CgroupDirsWithPrefix(ManagerId(id)).empty());
  EXPECT_EQ(service_->Destroy(id).code(), Code::kNotFound);
  EXPECT_EQ(service_->Exec(id, Call({"/bin/true"})).status().code(), Code::kNotFound);
}

TEST_P(SandboxServiceTest, CreateIsIdempotentWithAClientKey) {
  const std::string a = CreateOrDie(SandboxSpec(), "episode-17");
  const std::string b = CreateOrDie(SandboxSpec(), "episode-17");
  const std::string c = CreateOrDie(SandboxSpec(), "episode-18");
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_TRUE(service_->Destroy(a).ok());
  EXPECT_TRUE(service_->Destroy(c).ok());
  // Once destroyed, the key creates a new sandbox.
  const std::string d = CreateOrDie(SandboxSpec(), "episode-17");
  EXPECT_NE(a, d);
  EXPECT_TRUE(service_->Destroy(d).ok());
}

TEST_P(SandboxServiceTest, LimitsOfTheSpecApply) {
  SandboxSpec spec;
  spec.image = ImageKind::kBusybox;
  spec.pids = 16;
  const std::string id = CreateOrDie(spec);
  // The host's view of the sandbox's pids cgroup carries the limit.
  std::string limit;
  for (const auto& dir : CgroupDirsWithPrefix(ManagerId(id))) {
    if (::access((dir + "/pids.max").c_str(), R_OK) == 0) limit = ReadHostFile(dir + "/pids.max");
  }
  EXPECT_EQ(limit, "16\n");
  // And it bites: 30 background sleeps cannot all start.
  auto result = service_->Exec(
      id, Call({"/bin/sh", "-c", "n=0; for i in $(seq 30); do sleep 5 & n=$((n+1)); done 2>/dev/null; kill $(jobs -p) "
                                 "2>/dev/null; echo started"}));
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_NE(result->stderr_data + result->stdout_data, "started\n");
  EXPECT_TRUE(service_->Destroy(id).ok());
}

TEST_P(SandboxServiceTest, UnknownSandboxIsNotFound) {
  const std::string id = "fr-1-1-999999";
  EXPECT_EQ(service_->Exec(id, Call({"/bin/true"})).status().code(), Code::kNotFound);
  EXPECT_EQ(service_->PutFile(id, "/tmp/x", "x").code(), Code::kNotFound);
  EXPECT_EQ(service_->GetFile(id, "/tmp/x").status().code(), Code::kNotFound);
  EXPECT_EQ(service_->Freeze(id).code(), Code::kNotFound);
  EXPECT_EQ(service_->Thaw(id).code(), Code::kNotFound);
  EXPECT_EQ(service_->Destroy(id).code(), Code::kNotFound);
  EXPECT_EQ(service_->Events(id, 0).status().code(), Code::kNotFound);
}

TEST_P(SandboxServiceTest, BadSpecIsInvalidArgument) {
  SandboxSpec spec;
  spec.rw_paths = {"relative/path"};
  auto id = service_->Create(spec);
  EXPECT_EQ(id.status().code(), Code::kInvalidArgument);
  EXPECT_NE(id.status().message().find("relative/path"), std::string::npos) << id.status().ToString();
  EXPECT_EQ(service_->Exec(CreateOrDie(), ExecCall()).status().code(), Code::kInvalidArgument);
}

TEST_P(SandboxServiceTest, EventsFollowTheLifecycle) {
  const std::string id = CreateOrDie();
  auto first = service_->Events(id, 0);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_FALSE(first->events.empty());
  EXPECT_EQ(first->events[0].kind, EventKind::kCreated);
  EXPECT_EQ(first->events[0].seq, 1u);
  EXPECT_EQ(first->events[0].sandbox_id, id);
  EXPECT_FALSE(first->closed);
  const uint64_t cursor = first->next_cursor;
  // Nothing new: an immediate empty page.
  auto none = service_->Events(id, cursor);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->events.empty());
  // A waiting reader is woken by the destroy.
  Result<EventPage> waited = Status::Internal("unset");
  const auto start = std::chrono::steady_clock::now();
  std::thread reader([&] { waited = service_->Events(id, cursor, milliseconds(10000)); });
  std::this_thread::sleep_for(milliseconds(200));
  ASSERT_TRUE(service_->Destroy(id).ok());
  reader.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  ASSERT_TRUE(waited.ok()) << waited.status().ToString();
  ASSERT_FALSE(waited->events.empty());
  EXPECT_EQ(waited->events.back().kind, EventKind::kDestroyed);
  EXPECT_GT(waited->events.back().seq, cursor);
  // Still readable after Destroy, and marked closed.
  auto after = service_->Events(id, 0);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_TRUE(after->closed);
  EXPECT_EQ(after->events.back().kind, EventKind::kDestroyed);
}

TEST_P(SandboxServiceTest, ExecTimeoutIsAnEvent) {
  const std::string id = CreateOrDie();
  auto result = service_->Exec(id, Call({"/bin/sleep", "30"}, milliseconds(100)));
  ASSERT_TRUE(result.ok());
  ASSERT_TRUE(result->timed_out);
  auto page = service_->Events(id, 0);
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  bool timeout_seen = false;
  for (const auto& event : page->events) timeout_seen |= event.kind == EventKind::kTimeout;
  EXPECT_TRUE(timeout_seen);
  EXPECT_TRUE(service_->Destroy(id).ok());
}

TEST_P(SandboxServiceTest, SignalStopsTheRunningExec) {
  const std::string id = CreateOrDie();
  EXPECT_EQ(service_->Signal(id, SIGTERM).code(), Code::kFailedPrecondition);
  EXPECT_EQ(service_->Signal(id, 99).code(), Code::kInvalidArgument);
  EXPECT_EQ(service_->Signal("fr-1-1-424242", SIGTERM).code(), Code::kNotFound);
  const auto start = std::chrono::steady_clock::now();
  auto exec = std::async(std::launch::async, [&] { return service_->Exec(id, Call({"/bin/sleep", "30"})); });
  // kFailedPrecondition until the exec has started.
  Status sent;
  do {
    std::this_thread::sleep_for(milliseconds(5));
    sent = service_->Signal(id, SIGKILL);
  } while (sent.code() == Code::kFailedPrecondition &&
           std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  ASSERT_TRUE(sent.ok()) << sent.ToString();
  auto result = exec.get();
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(result->signal, SIGKILL);
  EXPECT_EQ(result->exit_code, 128 + SIGKILL);
  EXPECT_FALSE(result->timed_out);
  EXPECT_TRUE(service_->Destroy(id).ok());
}

INSTANTIATE_TEST_SUITE_P(Transports, SandboxServiceTest, ::testing::Values("http", "local"),
                         [](const auto& info) { return info.param; });

// The wire-level behaviour of the HTTP API: status codes and error bodies.
class ApiHttpTest : public SandboxFixture {
 protected:
  void SetUp() override {
    SandboxFixture::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    HttpServerOptions options;
    options.bearer_token = kApiToken;
    options.max_body_bytes = 1 << 20;
    server_ = std::make_unique<SandboxServer>(manager_.get(), NodePolicy(), options);
    ASSERT_TRUE(server_->Start().ok());
    http_ = Client(kApiToken);
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }

  std::string Internal(const std::string& id) {
    Result<std::string> internal = server_->ManagerId(id);
    return internal.ok() ? *internal : id;
  }

  std::unique_ptr<HttpClient> Client(const std::string& token) {
    HttpClientOptions options;
    options.base_url = server_->base_url();
    options.bearer_token = token;
    auto client = HttpClient::Create(options);
    EXPECT_TRUE(client.ok());
    return std::make_unique<HttpClient>(std::move(*client));
  }

  // Sends and expects `status` with an error body of `code` whose message
  // contains `needle`.
  void ExpectError(const HttpClient& client, HttpMethod method, const std::string& path, const std::string& body,
                   int status, Code code, const std::string& needle = "") {
    auto reply = client.Send(method, path, body, "application/json");
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    EXPECT_EQ(reply->status, status) << HttpMethodName(method) << " " << path << ": " << reply->body;
    const Status parsed = StatusFromHttpReply(reply->status, reply->body);
    EXPECT_EQ(parsed.code(), code) << parsed.ToString();
    EXPECT_NE(parsed.message().find(needle), std::string::npos) << parsed.ToString();
  }

  std::string CreateViaHttp(const std::string& body = "{}") {
    auto reply = http_->Send(HttpMethod::kPost, "/v1/sandboxes", body, "application/json");
    EXPECT_TRUE(reply.ok());
    if (!reply.ok()) return "";
    EXPECT_EQ(reply->status, 201) << reply->body;
    auto json = ParseJson(reply->body);
    EXPECT_TRUE(json.ok());
    return json.ok() ? json->value("id", "") : "";
  }

  std::unique_ptr<SandboxServer> server_;
  std::unique_ptr<HttpClient> http_;
};

TEST_F(ApiHttpTest, RequiresTheBearerToken) {
  ExpectError(*Client(""), HttpMethod::kPost, "/v1/sandboxes", "{}", 401, Code::kUnauthenticated, "missing");
  ExpectError(*Client("wrong"), HttpMethod::kPost, "/v1/sandboxes", "{}", 401, Code::kUnauthenticated, "invalid");
  ExpectError(*Client("wrong"), HttpMethod::kGet, "/metrics", "", 401, Code::kUnauthenticated);
  EXPECT_TRUE(manager_->List().empty());
}

TEST_F(ApiHttpTest, MalformedJsonAndBadFieldsAre400) {
  ExpectError(*http_, HttpMethod::kPost, "/v1/sandboxes", "{\"image\": ", 400, Code::kInvalidArgument, "parse error");
  ExpectError(*http_, HttpMethod::kPost, "/v1/sandboxes", R"({"memory": "lots"})", 400, Code::kInvalidArgument,
              "body.memory");
  ExpectError(*http_, HttpMethod::kPost, "/v1/sandboxes", R"({"pids": "many"})", 400, Code::kInvalidArgument,
              "body.pids");
  ExpectError(*http_, HttpMethod::kPost, "/v1/sandboxes", R"({"imgae": "host"})", 400, Code::kInvalidArgument,
              "imgae");
  ExpectError(*http_, HttpMethod::kPost, "/v1/sandboxes", R"({"image": 7})", 400, Code::kInvalidArgument,
              "body.image");
  ExpectError(*http_, HttpMethod::kPost, "/v1/sandboxes", R"({"allow": ["10.0.0.1:99999"]})", 400,
              Code::kInvalidArgument, "body.allow[0]");
  ExpectError(*http_, HttpMethod::kPost, "/v1/sandboxes", "[1, 2]", 400, Code::kInvalidArgument, "body");
  EXPECT_TRUE(manager_->List().empty());

  const std::string id = CreateViaHttp(R"({"image": "busybox", "memory": "64M", "pids": 32, "ttl": "60s"})");
  ASSERT_FALSE(id.empty());
  const std::string exec = "/v1/sandboxes/" + id + "/exec";
  ExpectError(*http_, HttpMethod::kPost, exec, "not json", 400, Code::kInvalidArgument, "parse error");
  ExpectError(*http_, HttpMethod::kPost, exec, "{}", 400, Code::kInvalidArgument, "body.cmd");
  ExpectError(*http_, HttpMethod::kPost, exec, R"({"cmd": ["true"], "timeout": "soon"})", 400,
              Code::kInvalidArgument, "body.timeout");
  ExpectError(*http_, HttpMethod::kPost, exec, R"({"cmd": [1]})", 400, Code::kInvalidArgument, "body.cmd[0]");
  ExpectError(*http_, HttpMethod::kPut, "/v1/sandboxes/" + id + "/files", "x", 400, Code::kInvalidArgument, "path");
  ExpectError(*http_, HttpMethod::kPut, "/v1/sandboxes/" + id + "/files?path=/tmp/x&mode=9z", "x", 400,
              Code::kInvalidArgument, "mode");
  ExpectError(*http_, HttpMethod::kGet, "/v1/sandboxes/" + id + "/events?cursor=abc", "", 400,
              Code::kInvalidArgument, "cursor");
  ExpectError(*http_, HttpMethod::kGet, "/v1/sandboxes/" + id + "/events?wait_ms=-1", "", 400,
              Code::kInvalidArgument, "wait_ms");
  ASSERT_TRUE(manager_->Destroy(Internal(id)).ok());
}

TEST_F(ApiHttpTest, UnknownSandboxIs404) {
  const std::string base = "/v1/sandboxes/fr-1-1-424242";
  ExpectError(*http_, HttpMethod::kPost, base + "/exec", R"({"cmd": ["true"]})", 404, Code::kNotFound,
              "fr-1-1-424242");
  ExpectError(*http_, HttpMethod::kPost, base + "/exec/stream", R"({"cmd": ["true"]})", 404, Code::kNotFound);
  ExpectError(*http_, HttpMethod::kGet, base + "/files?path=/etc/hostname", "", 404, Code::kNotFound);
  ExpectError(*http_, HttpMethod::kPost, base + "/freeze", "", 404, Code::kNotFound);
  ExpectError(*http_, HttpMethod::kDelete, base, "", 404, Code::kNotFound);
  ExpectError(*http_, HttpMethod::kGet, base + "/events", "", 404, Code::kNotFound);
  ExpectError(*http_, HttpMethod::kPost, base + "/signal", R"({"signal": "SIGTERM"})", 404, Code::kNotFound,
              "fr-1-1-424242");
}

TEST_F(ApiHttpTest, FilesThatAreNoRegularFilesAre400) {
  const std::string id = CreateViaHttp();
  ASSERT_FALSE(id.empty());
  ExecRequest setup;
  setup.argv = {"/bin/sh", "-c", "mkfifo /tmp/fifo && ln -s /tmp/loop /tmp/loop"};
  auto made = manager_->Exec(Internal(id), setup);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  ASSERT_EQ(made->exit_code, 0) << made->stderr_data;
  const std::string files = "/v1/sandboxes/" + id + "/files?path=";
  ExpectError(*http_, HttpMethod::kGet, files + "/tmp/fifo", "", 400, Code::kInvalidArgument,
              "path /tmp/fifo: a fifo, not a regular file");
  ExpectError(*http_, HttpMethod::kPut, files + "/tmp/fifo", "x", 400, Code::kInvalidArgument,
              "path /tmp/fifo: a fifo, not a regular file");
  ExpectError(*http_, HttpMethod::kGet, files + "/dev/zero", "", 400, Code::kInvalidArgument,
              "path /dev/zero: a character device, not a regular file");
  ExpectError(*http_, HttpMethod::kGet, files + "/tmp/loop/x", "", 400, Code::kInvalidArgument,
              "path /tmp/loop/x: a symlink loop");
  ASSERT_TRUE(manager_->Destroy(Internal(id)).ok());
}

TEST_F(ApiHttpTest, OversizedBodyIs413) {
  const std::string id = CreateViaHttp();
  ASSERT_FALSE(id.empty());
  ExpectError(*http_, HttpMethod::kPut, "/v1/sandboxes/" + id + "/files?path=/tmp/big", std::string(2 << 20, 'a'),
              413, Code::kResourceExhausted);
  EXPECT_EQ(manager_->GetFile(Internal(id), "/tmp/big").status().code(), Code::kNotFound);
  ASSERT_TRUE(manager_->Destroy(Internal(id)).ok());
}

TEST_F(ApiHttpTest, FrozenExecIs409) {
  const std::string id = CreateViaHttp();
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(http_->PostJson("/v1/sandboxes/" + id + "/freeze", nullptr).ok());
  ExpectError(*http_, HttpMethod::kPost, "/v1/sandboxes/" + id + "/exec", R"({"cmd": ["true"]})", 409,
              Code::kFailedPrecondition, "frozen");
  auto events = http_->GetJson("/v1/sandboxes/" + id + "/events");
  ASSERT_TRUE(events.ok()) << events.status().ToString();
  EXPECT_EQ((*events)["events"][0]["kind"], "created");
  EXPECT_EQ((*events)["cursor"], (*events)["events"].back()["seq"]);
  ASSERT_TRUE(manager_->Destroy(Internal(id)).ok());
}

TEST_F(ApiHttpTest, SignalTakesNamesAndNumbers) {
  const std::string id = CreateViaHttp();
  ASSERT_FALSE(id.empty());
  const std::string signal = "/v1/sandboxes/" + id + "/signal";
  ExpectError(*http_, HttpMethod::kPost, signal, R"({"signal": "SIGTERM"})", 409, Code::kFailedPrecondition,
              "no exec is running");
  ExpectError(*http_, HttpMethod::kPost, signal, R"({"signal": "SIGFOO"})", 400, Code::kInvalidArgument,
              "body.signal: unknown signal name \"SIGFOO\"");
  ExpectError(*http_, HttpMethod::kPost, signal, R"({"signal": 65})", 400, Code::kInvalidArgument, "body.signal: 65");
  ExpectError(*http_, HttpMethod::kPost, signal, R"({"signal": true})", 400, Code::kInvalidArgument, "body.signal");
  ExpectError(*http_, HttpMethod::kPost, signal, "{}", 400, Code::kInvalidArgument, "body.signal");
  ExpectError(*http_, HttpMethod::kPost, signal, R"({"signal": 15, "pid": 1})", 400, Code::kInvalidArgument, "pid");
  auto metrics = http_->Get("/metrics");
  ASSERT_TRUE(metrics.ok());
  EXPECT_NE(metrics->body.find("flashroll_sandbox_failures_total{op=\"signal\"} 6\n"), std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("\nflashroll_sandbox_teardowns_pending 0\n"), std::string::npos) << metrics->body;
  EXPECT_NE(metrics->body.find("\nflashroll_sandbox_teardown_failures_total 0\n"), std::string::npos) << metrics->body;

  for (const Json& request : {Json{{"signal", "SIGUSR2"}}, Json{{"signal", SIGUSR2}}}) {
    auto exec = std::async(std::launch::async, [&] {
      return http_->PostJson("/v1/sandboxes/" + id + "/exec", Json{{"cmd", {"/bin/sleep", "30"}}});
    });
    const auto start = std::chrono::steady_clock::now();
    Result<HttpResponse> reply = Status::Internal("unset");
    do {
      std::this_thread::sleep_for(milliseconds(5));
      reply = http_->Send(HttpMethod::kPost, signal, DumpJson(request), "application/json");
      ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    } while (reply->status == 409 && std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
    EXPECT_EQ(reply->status, 200) << reply->body;
    auto replied = ParseJson(reply->body);
    ASSERT_TRUE(replied.ok()) << reply->body;
    EXPECT_EQ((*replied)["signal"], SIGUSR2) << reply->body;
    auto result = exec.get();
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    EXPECT_EQ((*result)["signal"], SIGUSR2) << DumpJson(request);
    EXPECT_EQ((*result)["exit_code"], 128 + SIGUSR2);
  }
  ASSERT_TRUE(manager_->Destroy(Internal(id)).ok());
}

TEST_F(ApiHttpTest, IdempotencyKeyInQuery) {
  const std::string a = CreateViaHttp();
  ASSERT_FALSE(a.empty());
  std::string ids[2];
  for (auto& id : ids) {
    auto reply = http_->Send(HttpMethod::kPost, "/v1/sandboxes?client_key=k1", "{}", "application/json");
    ASSERT_TRUE(reply.ok());
    EXPECT_EQ(reply->status, 201);
    id = ParseJson(reply->body)->value("id", "");
  }
  EXPECT_EQ(ids[0], ids[1]);
  EXPECT_NE(ids[0], a);
  EXPECT_EQ(manager_->List().size(), 2u);
}

// The header form of the key, as a client outside Flashroll sends it.
TEST_F(ApiHttpTest, IdempotencyKeyHeader) {
  httplib::Client client("127.0.0.1", server_->port());
  const httplib::Headers headers = {{"Authorization", std::string("Bearer ") + kApiToken},
                                    {"Idempotency-Key", "episode-9"}};
  std::string ids[2];
  for (auto& id : ids) {
    auto reply = client.Post("/v1/sandboxes", headers, R"({"image": "busybox"})", "application/json");
    ASSERT_TRUE(reply);
    EXPECT_EQ(reply->status, 201) << reply->body;
    auto json = ParseJson(reply->body);
    ASSERT_TRUE(json.ok());
    id = json->value("id", "");
  }
  EXPECT_FALSE(ids[0].empty());
  EXPECT_EQ(ids[0], ids[1]);
  EXPECT_EQ(manager_->List().size(), 1u);
}

TEST_F(ApiHttpTest, StreamedExecIsNdjson) {
  const std::string id = CreateViaHttp();
  ASSERT_FALSE(id.empty());
  auto reply = http_->Send(HttpMethod::kPost, "/v1/sandboxes/" + id + "/exec/stream",
                           R"({"cmd": ["/bin/sh", "-c", "echo a; sleep 0.2; echo b; exit 4"]})", "application/json");
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply->status, 200);
  EXPECT_EQ(reply->Header("content-type").value_or(""), "application/x-ndjson");
  std::vector<Json> lines;
  size_t start = 0;
  while (start < reply->body.size()) {
    const size_t end = reply->body.find('\n', start);
    ASSERT_NE(end, std::string::npos) << reply->body;
    auto line = ParseJson(reply->body.substr(start, end - start));
    ASSERT_TRUE(line.ok()) << reply->body;
    lines.push_back(*line);
    start = end + 1;
  }
  // "a" and "b" arrive as separate chunks: the sleep separates them.
  ASSERT_EQ(lines.size(), 3u) << reply->body;
  EXPECT_EQ(lines[0], (Json{{"stream", "stdout"}, {"data", "a\n"}}));
  EXPECT_EQ(lines[1], (Json{{"stream", "stdout"}, {"data", "b\n"}}));
  EXPECT_EQ(lines[2]["result"]["exit_code"], 4);
  ASSERT_TRUE(manager_->Destroy(Internal(id)).ok());
}

TEST_F(ApiHttpTest, MetricsCountOperations) {
  const std::string id = CreateViaHttp();
  ASSERT_FALSE(id.empty());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(http_->PostJson("/v1/sandboxes/" + id + "/exec", Json{{"cmd", {"/bin/true"}}}).ok());
  }
  EXPECT_FALSE(http_->PostJson("/v1/sandboxes/fr-1-1-5/exec", Json{{"cmd", {"/bin/true"}}}).ok());
  auto text = http_->Get("/metrics");
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->status, 200);
  const std::string& m = text->body;
  EXPECT_NE(m.find("flashroll_sandboxes_live 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("flashroll_sandbox_creates_total 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("flashroll_sandbox_execs_total 3\n"), std::string::npos) << m;
  EXPECT_NE(m.find("flashroll_sandbox_failures_total{op=\"exec\"} 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("flashroll_sandbox_exec_duration_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos) << m;
  EXPECT_NE(m.find("flashroll_sandbox_exec_duration_seconds_count 3\n"), std::string::npos) << m;
  ASSERT_TRUE(http_->DeleteJson("/v1/sandboxes/" + id).ok());
  text = http_->Get("/metrics");
  ASSERT_TRUE(text.ok());
  EXPECT_NE(text->body.find("flashroll_sandboxes_live 0\n"), std::string::npos);
  EXPECT_NE(text->body.find("flashroll_sandbox_destroys_total 1\n"), std::string::npos);
}

// The daemon binary: serves on an ephemeral port, destroys its sandboxes on
// SIGTERM.
TEST(SandboxdBinary, ServesAndCleansUpOnSigterm) {
  if (::geteuid() != 0) GTEST_SKIP() << "sandboxd needs root";
  char token_path[] = "/tmp/flashroll-sandboxd-token-XXXXXX";
  const int token_fd = ::mkstemp(token_path);
  ASSERT_GE(token_fd, 0);
  ASSERT_EQ(::write(token_fd, kApiToken, sizeof(kApiToken) - 1), static_cast<ssize_t>(sizeof(kApiToken) - 1));
  ::close(token_fd);
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::execl(FLASHROLL_BIN, FLASHROLL_BIN, "sandboxd", "--listen", "127.0.0.1:0", "--token-file", token_path,
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out[1]);
  std::string url;
  char c;
  while (::read(out[0], &c, 1) == 1 && c != '\n') url += c;
  ::close(out[0]);
  ASSERT_EQ(url.rfind("http://127.0.0.1:", 0), 0u) << url;

  HttpClientOptions options;
  options.base_url = url;
  options.bearer_token = kApiToken;
  auto client = HttpSandboxClient::Create(options);
  ASSERT_TRUE(client.ok());
  auto id = (*client)->Create(SandboxSpec());
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  auto result = (*client)->Exec(*id, Call({"/bin/sh", "-c", "echo hi; exit 7"}));
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->exit_code, 7);
  EXPECT_EQ(result->stdout_data, "hi\n");
  // The Manager names its sandboxes fr-<its pid>-...; public ids are random.
  const std::string daemon_prefix = "fr-" + std::to_string(pid) + "-";
  EXPECT_FALSE(CgroupDirsWithPrefix(daemon_prefix).empty());

  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_TRUE(CgroupDirsWithPrefix(daemon_prefix).empty());
  ::unlink(token_path);
}

// Runs `flashroll ARGS` through the shell; returns its exit code and stdout.
std::pair<int, std::string> RunFlashroll(const std::string& args) {
  const std::string command = std::string(FLASHROLL_BIN) + " " + args + " 2>/dev/null";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, ""};
  std::string out;
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof(buffer), pipe)) out.append(buffer, n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST(SandboxdBinary, BadFlagsExitTwo) {
  EXPECT_EQ(RunFlashroll("sandboxd --listen 127.0.0.1:0").first, 2);  // no --token-file
  EXPECT_EQ(RunFlashroll("sandboxd --listen nonsense --token-file /etc/hostname").first, 2);
  EXPECT_EQ(RunFlashroll("sandboxd --listen 127.0.0.1:70000 --token-file /etc/hostname").first, 2);
  EXPECT_EQ(RunFlashroll("sandboxd --listen 127.0.0.1:0 --token-file /nonexistent/token").first, 2);
  EXPECT_EQ(RunFlashroll("bench sandbox --iterations 0").first, 2);
}

TEST(BenchSandboxCommand, PrintsTheJsonSummary) {
  if (::geteuid() != 0) GTEST_SKIP() << "bench sandbox needs root";
  auto [code, out] = RunFlashroll("bench sandbox --json --iterations 16");
  ASSERT_EQ(code, 0) << out;
  auto json = ParseJson(out);
  ASSERT_TRUE(json.ok()) << out;
  for (const char* key : {"p50_ms", "p99_ms", "churn_per_s"}) {
    ASSERT_TRUE(json->contains(key)) << out;
    EXPECT_GT((*json)[key].get<double>(), 0) << key;
  }
  EXPECT_LE((*json)["p50_ms"].get<double>(), (*json)["p99_ms"].get<double>());
}

}  // namespace
}  // namespace flashroll::sandbox::api
