// The sandbox API's JSON wire format (sandbox/api/wire.h): what a client
// sends is what the server parses, and bad input names its field. No root
// needed.
#include <signal.h>

#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "common/json.h"
#include "sandbox/api/client.h"
#include "sandbox/api/wire.h"

namespace flashroll::sandbox::api {
namespace {

Result<SandboxSpec> Parse(const std::string& text) {
  auto json = ParseJson(text);
  EXPECT_TRUE(json.ok()) << text;
  if (!json.ok()) return json.status();
  const Json value = *json;
  return SpecFromJson(JsonView(value, "body"));
}

TEST(ApiWireTest, SpecRoundTripsThroughJson) {
  SandboxSpec spec;
  ASSERT_TRUE(ParseImage("busybox", &spec).ok());
  spec.net = NetMode::kPolicy;
  spec.allow = {*ParseAllowRule("10.0.0.0/8:443"), *ParseAllowRule("[::1]:*")};
  spec.memory_bytes = 64u << 20;
  spec.pids = 32;
  spec.cpus = 0.5;
  spec.cpuset = "0";
  spec.disk_bytes = 128u << 20;
  spec.rw_paths = {"/tmp"};
  spec.hostname = "box";
  spec.env = {"A=1"};
  spec.ttl = std::chrono::milliseconds(1500);
  const Json wire = SpecToJson(spec);
  auto back = SpecFromJson(JsonView(wire, "body"));
  ASSERT_TRUE(back.ok()) << back.status().ToString() << " " << DumpJson(wire);
  EXPECT_EQ(back->image, ImageKind::kBusybox);
  EXPECT_EQ(back->net, NetMode::kPolicy);
  ASSERT_EQ(back->allow.size(), 2u);
  EXPECT_EQ(back->allow[0].prefix_len, 8);
  EXPECT_EQ(back->allow[0].port, 443);
  EXPECT_EQ(back->allow[1].family, spec.allow[1].family);
  EXPECT_EQ(back->memory_bytes, spec.memory_bytes);
  EXPECT_EQ(back->pids, 32);
  EXPECT_EQ(back->cpus, 0.5);
  EXPECT_EQ(back->cpuset, "0");
  EXPECT_EQ(back->disk_bytes, spec.disk_bytes);
  EXPECT_EQ(back->rw_paths, spec.rw_paths);
  EXPECT_EQ(back->hostname, "box");
  EXPECT_EQ(back->env, spec.env);
  EXPECT_EQ(back->ttl, std::chrono::milliseconds(1500));
}

TEST(ApiWireTest, SpecAcceptsTextSizesAndDurations) {
  auto spec = Parse(R"({"memory": "256M", "disk": "1G", "ttl": "10s"})");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->memory_bytes, 256u << 20);
  EXPECT_EQ(spec->disk_bytes, 1u << 30);
  EXPECT_EQ(spec->ttl, std::chrono::seconds(10));
  auto defaults = Parse("null");
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->image, ImageKind::kHost);
  EXPECT_EQ(defaults->env, SandboxSpec().env);
}

TEST(ApiWireTest, SpecErrorsNameTheField) {
  struct Case {
    const char* body;
    const char* field;
  } cases[] = {
      {R"({"memory": -1})", "body.memory"},
      {R"({"memory": "lots"})", "body.memory"},
      {R"({"ttl": 1.5})", "body.ttl"},
      {R"({"net": "bridge"})", "body.net"},
      {R"({"allow": ["10.0.0.1:80"]})", "body"},  // allow without net policy
      {R"({"allow": "10.0.0.1:80"})", "body.allow"},
      {R"({"env": ["A=1", 2]})", "body.env[1]"},
      {R"({"hostnme": "x"})", "hostnme"},
      {R"({"rw_paths": ["tmp"]})", "tmp"},
  };
  for (const auto& c : cases) {
    auto spec = Parse(c.body);
    ASSERT_FALSE(spec.ok()) << c.body;
    EXPECT_EQ(spec.status().code(), Code::kInvalidArgument) << c.body;
    EXPECT_NE(spec.status().message().find(c.field), std::string::npos) << c.body << " -> " << spec.status().ToString();
  }
}

TEST(ApiWireTest, ExecCallAndResultRoundTrip) {
  ExecCall call;
  call.argv = {"/bin/sh", "-c", "echo hi"};
  call.env = {"X=1"};
  call.cwd = "/tmp";
  call.timeout = std::chrono::milliseconds(2500);
  call.max_output_bytes = 1024;
  const Json wire = ExecCallToJson(call);
  auto back = ExecCallFromJson(JsonView(wire, "body"));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->argv, call.argv);
  EXPECT_EQ(back->env, call.env);
  EXPECT_EQ(back->cwd, "/tmp");
  EXPECT_EQ(back->timeout, call.timeout);
  EXPECT_EQ(back->max_output_bytes, 1024u);

  const Json relative = {{"cmd", {"true"}}, {"cwd", "tmp"}};
  EXPECT_NE(ExecCallFromJson(JsonView(relative, "body")).status().message().find("body.cwd"), std::string::npos);
  const Json empty = {{"cmd", Json::array()}};
  EXPECT_NE(ExecCallFromJson(JsonView(empty, "body")).status().message().find("body.cmd"), std::string::npos);

  ExecResult result;
  result.exit_code = 137;
  result.signal = 9;
  result.timed_out = true;
  result.stdout_data = "out";
  result.stderr_data = "err";
  result.output_truncated = true;
  result.duration_ms = 12.5;
  const Json rwire = ExecResultToJson(result);
  auto rback = ExecResultFromJson(JsonView(rwire, "reply"));
  ASSERT_TRUE(rback.ok());
  EXPECT_EQ(rback->exit_code, 137);
  EXPECT_EQ(rback->signal, 9);
  EXPECT_TRUE(rback->timed_out);
  EXPECT_EQ(rback->stdout_data, "out");
  EXPECT_EQ(rback->stderr_data, "err");
  EXPECT_TRUE(rback->output_truncated);
  EXPECT_EQ(rback->duration_ms, 12.5);
}

// An exec's and a sandbox's user: a name or a number, checked at the edge.
TEST(ApiWireTest, UserAndGroupTravelAsNamesOrNumbers) {
  ExecCall call;
  call.argv = {"id"};
  call.user = "postgres";
  call.group = "104";
  const Json wire = ExecCallToJson(call);
  auto back = ExecCallFromJson(JsonView(wire, "body"));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->user, "postgres");
  EXPECT_EQ(back->group, "104");
  const Json numeric = {{"cmd", {"id"}}, {"user", 65534}};
  EXPECT_EQ(ExecCallFromJson(JsonView(numeric, "body"))->user, "65534");
  const Json colon = {{"cmd", {"id"}}, {"user", "a:b"}};
  EXPECT_NE(ExecCallFromJson(JsonView(colon, "body")).status().message().find("body: user 'a:b'"), std::string::npos)
      << ExecCallFromJson(JsonView(colon, "body")).status().ToString();
  const Json negative = {{"cmd", {"id"}}, {"user", -1}};
  EXPECT_FALSE(ExecCallFromJson(JsonView(negative, "body")).ok());

  SandboxSpec spec;
  spec.user = "nobody";
  spec.group = "nogroup";
  const Json spec_wire = SpecToJson(spec);
  auto spec_back = SpecFromJson(JsonView(spec_wire, "body"));
  ASSERT_TRUE(spec_back.ok()) << spec_back.status().ToString();
  EXPECT_EQ(spec_back->user, "nobody");
  EXPECT_EQ(spec_back->group, "nogroup");
}

TEST(ApiWireTest, EventPageRoundTrips) {
  EventPage page;
  page.next_cursor = 3;
  page.closed = true;
  for (auto kind : {EventKind::kCreated, EventKind::kOom, EventKind::kDestroyed}) {
    SandboxEvent event;
    event.seq = page.events.size() + 1;
    event.kind = kind;
    event.detail = "d" + std::to_string(event.seq);
    event.time = std::chrono::system_clock::time_point(std::chrono::milliseconds(1700000000123));
    page.events.push_back(event);
  }
  const Json wire = EventPageToJson(page);
  EXPECT_EQ(wire["events"][1]["kind"], "oom");
  auto back = EventPageFromJson(JsonView(wire, "reply"), "fr-1-2-3");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->next_cursor, 3u);
  EXPECT_TRUE(back->closed);
  ASSERT_EQ(back->events.size(), 3u);
  EXPECT_EQ(back->events[1].kind, EventKind::kOom);
  EXPECT_EQ(back->events[2].seq, 3u);
  EXPECT_EQ(back->events[2].detail, "d3");
  EXPECT_EQ(back->events[0].sandbox_id, "fr-1-2-3");
  EXPECT_EQ(back->events[0].time, page.events[0].time);
  Json bad = wire;
  bad["events"][0]["kind"] = "exploded";
  EXPECT_NE(EventPageFromJson(JsonView(bad, "reply"), "x").status().message().find("reply.events[0].kind"),
            std::string::npos);
}

Result<int> ParseSignal(const std::string& text) {
  auto json = ParseJson(text);
  EXPECT_TRUE(json.ok()) << text;
  if (!json.ok()) return json.status();
  const Json value = *json;
  return SignalFromJson(JsonView(value, "body"));
}

// The parsed signal number, or -1 on error.
int SignalOf(const std::string& text) {
  auto parsed = ParseSignal(text);
  EXPECT_TRUE(parsed.ok()) << text << ": " << parsed.status().ToString();
  return parsed.ok() ? *parsed : -1;
}

TEST(ApiWireTest, SignalByNameOrNumber) {
  EXPECT_EQ(SignalOf(R"({"signal": "SIGTERM"})"), SIGTERM);
  EXPECT_EQ(SignalOf(R"({"signal": "SIGKILL"})"), SIGKILL);
  EXPECT_EQ(SignalOf(R"({"signal": "SIGSTOP"})"), SIGSTOP);
  EXPECT_EQ(SignalOf(R"({"signal": 10})"), 10);
  EXPECT_EQ(SignalOf(R"({"signal": 64})"), 64);
  const Json wire = SignalToJson(SIGUSR1);
  auto back = SignalFromJson(JsonView(wire, "body"));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, SIGUSR1);

  for (const auto& [text, needle] : std::vector<std::pair<std::string, std::string>>{
           {R"({"signal": "SIGFOO"})", "body.signal: unknown signal name \"SIGFOO\""},
           {R"({"signal": "term"})", "\"term\""},
           {R"({"signal": 0})", "body.signal: 0 is not a signal number"},
           {R"({"signal": 65})", "body.signal: 65"},
           {R"({"signal": -9})", "body.signal: -9"},
           {R"({"signal": 1.5})", "body.signal"},
           {R"({})", "body.signal: missing"},
           {R"({"signal": 9, "sig": 9})", "\"sig\""},
           {"[9]", "body"}}) {
    auto parsed = ParseSignal(text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_EQ(parsed.status().code(), Code::kInvalidArgument) << text;
    EXPECT_NE(parsed.status().message().find(needle), std::string::npos) << text << ": " << parsed.status().ToString();
  }
}

TEST(ApiWireTest, UrlEncodeKeepsPathsReadable) {
  EXPECT_EQ(UrlEncode("/tmp/a b&c=d"), "/tmp/a%20b%26c%3Dd");
  EXPECT_EQ(UrlEncode("fr-1-2-3"), "fr-1-2-3");
}

}  // namespace
}  // namespace flashroll::sandbox::api
