// The sandbox API's wire format at its edges (sandbox/api/wire.h): every
// field's default, null and text forms, every signal and event kind, and the
// values SpecToJson writes.
#include <signal.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/json.h"
#include "sandbox/api/wire.h"

namespace flashroll::sandbox::api {
namespace {

Result<SandboxSpec> Spec(const std::string& text) {
  auto json = ParseJson(text);
  if (!json.ok()) return json.status();
  const Json value = *json;
  return SpecFromJson(JsonView(value, "body"));
}

TEST(ApiWireMutantsTest, SpecDefaultsAndNulls) {
  auto nothing = Spec("null");
  ASSERT_TRUE(nothing.ok()) << nothing.status().ToString();
  EXPECT_EQ(nothing->image, ImageKind::kHost);
  auto nulls = Spec(R"({"memory": null, "disk": null, "ttl": null, "allow": null, "rw_paths": null})");
  ASSERT_TRUE(nulls.ok()) << nulls.status().ToString();
  EXPECT_EQ(nulls->memory_bytes, 0u);
  EXPECT_EQ(nulls->disk_bytes, SandboxSpec().disk_bytes);
  EXPECT_EQ(nulls->ttl.count(), 0);
  EXPECT_TRUE(nulls->allow.empty());
  EXPECT_TRUE(nulls->rw_paths.empty());
  auto empty = Spec("{}");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->net, NetMode::kNone);
  EXPECT_EQ(empty->hostname, "sandbox");
  EXPECT_EQ(empty->seccomp, "default");
  EXPECT_EQ(empty->env, SandboxSpec().env);
  EXPECT_EQ(empty->pids, 0);
  EXPECT_EQ(empty->cpus, 0);
  EXPECT_EQ(empty->cpuset, "");
  // An explicit env replaces the default one, even when empty or null.
  auto no_env = Spec(R"({"env": []})");
  ASSERT_TRUE(no_env.ok());
  EXPECT_TRUE(no_env->env.empty());
  auto null_env = Spec(R"({"env": null})");
  ASSERT_TRUE(null_env.ok());
  EXPECT_TRUE(null_env->env.empty());
}

TEST(ApiWireMutantsTest, SpecNumbersAndText) {
  auto numbers = Spec(R"({"memory": 8388608, "disk": 2097152, "ttl": 2500, "pids": 9, "cpus": 1.5,
                          "cpuset": "0-1", "hostname": "h", "seccomp": "default", "net": "policy",
                          "allow": ["10.0.0.0/8:443", "[::1]:80"], "image": "busybox"})");
  ASSERT_TRUE(numbers.ok()) << numbers.status().ToString();
  EXPECT_EQ(numbers->memory_bytes, 8u << 20);
  EXPECT_EQ(numbers->disk_bytes, 2u << 20);
  EXPECT_EQ(numbers->ttl.count(), 2500);
  EXPECT_EQ(numbers->pids, 9);
  EXPECT_EQ(numbers->cpus, 1.5);
  EXPECT_EQ(numbers->cpuset, "0-1");
  EXPECT_EQ(numbers->hostname, "h");
  EXPECT_EQ(numbers->net, NetMode::kPolicy);
  ASSERT_EQ(numbers->allow.size(), 2u);
  EXPECT_EQ(numbers->allow[1].port, 80);
  EXPECT_EQ(numbers->image, ImageKind::kBusybox);
  auto text = Spec(R"({"memory": "8M", "disk": "2M", "ttl": "1m"})");
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(text->memory_bytes, 8u << 20);
  EXPECT_EQ(text->disk_bytes, 2u << 20);
  EXPECT_EQ(text->ttl.count(), 60000);
  for (const auto& [body, field] : std::vector<std::pair<std::string, std::string>>{
           {R"({"memory": "8Q"})", "body.memory"},
           {R"({"disk": "lots"})", "body.disk"},
           {R"({"ttl": "soon"})", "body.ttl"},
           {R"({"ttl": -5})", "body.ttl"},
           {R"({"memory": -1})", "body.memory"},
           {R"({"memory": "3M"})", "memory: must be at least 4M"},
           {R"({"net": "host"})", "body.net"},
           {R"({"image": "nowhere"})", "body.image"},
           {R"({"allow": ["1.2.3.4:80", "bad"]})", "body.allow[1]"},
           {R"({"allow": "1.2.3.4:80"})", "body.allow"},
           {R"({"rw_paths": [1]})", "body.rw_paths"},
           {R"({"hostname": ""})", "body: hostname"},
           {R"({"pids": "x"})", "body.pids"},
           {R"({"volume": 1})", "volume"}}) {
    auto spec = Spec(body);
    ASSERT_FALSE(spec.ok()) << body;
    EXPECT_EQ(spec.status().code(), Code::kInvalidArgument) << body;
    EXPECT_NE(spec.status().message().find(field), std::string::npos) << body << ": " << spec.status().ToString();
  }
}

TEST(ApiWireMutantsTest, SpecToJsonWritesEveryField) {
  SandboxSpec spec;
  spec.image = ImageKind::kDirectory;
  spec.image_dir = "/srv/img";
  spec.image_ref = "v2";
  spec.net = NetMode::kPolicy;
  spec.allow.push_back(*ParseAllowRule("10.0.0.1:53"));
  spec.memory_bytes = 5 << 20;
  spec.disk_bytes = 3 << 20;
  spec.pids = 4;
  spec.cpus = 0.25;
  spec.cpuset = "1";
  spec.rw_paths = {"/tmp"};
  spec.hostname = "hh";
  spec.env = {"A=1"};
  spec.ttl = std::chrono::milliseconds(777);
  spec.seccomp = "/p.json";
  const Json j = SpecToJson(spec);
  EXPECT_EQ(j["image"], "/srv/img:v2");
  EXPECT_EQ(j["net"], "policy");
  EXPECT_EQ(j["allow"], Json::array({"10.0.0.1:53"}));
  EXPECT_EQ(j["memory"], 5u << 20);
  EXPECT_EQ(j["disk"], 3u << 20);
  EXPECT_EQ(j["pids"], 4);
  EXPECT_EQ(j["cpus"], 0.25);
  EXPECT_EQ(j["cpuset"], "1");
  EXPECT_EQ(j["rw_paths"], Json::array({"/tmp"}));
  EXPECT_EQ(j["hostname"], "hh");
  EXPECT_EQ(j["env"], Json::array({"A=1"}));
  EXPECT_EQ(j["ttl"], 777u);
  EXPECT_EQ(j["seccomp"], "/p.json");
  spec.image_ref.clear();
  EXPECT_EQ(SpecToJson(spec)["image"], "/srv/img");
  spec.image = ImageKind::kHost;
  EXPECT_EQ(SpecToJson(spec)["image"], "host");
  spec.image = ImageKind::kBusybox;
  EXPECT_EQ(SpecToJson(spec)["image"], "busybox");
  spec.net = NetMode::kNone;
  EXPECT_EQ(SpecToJson(spec)["net"], "none");
  spec.ttl = std::chrono::milliseconds(-3);
  EXPECT_EQ(SpecToJson(spec)["ttl"], 0u);
}

Result<ExecCall> Call(const std::string& text) {
  auto json = ParseJson(text);
  if (!json.ok()) return json.status();
  const Json value = *json;
  return ExecCallFromJson(JsonView(value, "body"));
}

TEST(ApiWireMutantsTest, ExecCallEdges) {
  auto minimal = Call(R"({"cmd": ["true"]})");
  ASSERT_TRUE(minimal.ok()) << minimal.status().ToString();
  EXPECT_EQ(minimal->cwd, "");  // the sandbox's workdir, else "/"
  EXPECT_EQ(minimal->timeout.count(), 0);
  EXPECT_EQ(minimal->max_output_bytes, ExecCall().max_output_bytes);
  EXPECT_TRUE(minimal->env.empty());
  auto text_timeout = Call(R"({"cmd": ["true"], "timeout": "2s", "env": ["A=b"], "max_output_bytes": 7})");
  ASSERT_TRUE(text_timeout.ok()) << text_timeout.status().ToString();
  EXPECT_EQ(text_timeout->timeout.count(), 2000);
  EXPECT_EQ(text_timeout->env, std::vector<std::string>{"A=b"});
  EXPECT_EQ(text_timeout->max_output_bytes, 7u);
  EXPECT_EQ(Call(R"({"cmd": ["true"], "cwd": ""})").status().message(),
            "body.cwd: must be an absolute path, got \"\"");
  EXPECT_FALSE(Call(R"({"cmd": ["true"], "shell": true})").ok());
  EXPECT_FALSE(Call(R"({"cmd": "true"})").ok());
  EXPECT_FALSE(Call(R"({})").ok());
  EXPECT_FALSE(Call(R"(["true"])").ok());
  // The client leaves out what is default.
  ExecCall call;
  call.argv = {"ls"};
  Json j = ExecCallToJson(call);
  EXPECT_FALSE(j.contains("env"));
  EXPECT_FALSE(j.contains("timeout"));
  EXPECT_FALSE(j.contains("cwd"));
  call.cwd = "/work";
  EXPECT_EQ(ExecCallToJson(call)["cwd"], "/work");
  call.timeout = std::chrono::milliseconds(1);
  call.env = {"X=y"};
  j = ExecCallToJson(call);
  EXPECT_EQ(j["timeout"], 1u);
  EXPECT_EQ(j["env"], Json::array({"X=y"}));
}

TEST(ApiWireMutantsTest, ExecResultEveryField) {
  ExecResult result;
  result.exit_code = 3;
  result.signal = 15;
  result.cancelled = true;
  result.oom_killed = true;
  result.start_errno = 2;
  result.duration_ms = 0.5;
  const Json j = ExecResultToJson(result);
  EXPECT_EQ(j["cancelled"], true);
  EXPECT_EQ(j["oom_killed"], true);
  EXPECT_EQ(j["timed_out"], false);
  EXPECT_EQ(j["start_errno"], 2);
  auto back = ExecResultFromJson(JsonView(j, "reply"));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->exit_code, 3);
  EXPECT_EQ(back->signal, 15);
  EXPECT_TRUE(back->cancelled);
  EXPECT_TRUE(back->oom_killed);
  EXPECT_FALSE(back->timed_out);
  EXPECT_FALSE(back->output_truncated);
  EXPECT_EQ(back->start_errno, 2);
  EXPECT_EQ(back->duration_ms, 0.5);
  const Json minimal = {{"exit_code", 1}};
  auto defaults = ExecResultFromJson(JsonView(minimal, "reply"));
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_EQ(defaults->exit_code, 1);
  EXPECT_EQ(defaults->signal, 0);
  EXPECT_FALSE(defaults->cancelled);
  EXPECT_FALSE(defaults->oom_killed);
  EXPECT_EQ(defaults->stdout_data, "");
  const Json missing = Json::object();
  EXPECT_FALSE(ExecResultFromJson(JsonView(missing, "reply")).ok());
  const Json not_object = Json::array();
  EXPECT_FALSE(ExecResultFromJson(JsonView(not_object, "reply")).ok());
}

TEST(ApiWireMutantsTest, EverySignalName) {
  const std::pair<const char*, int> names[] = {{"SIGHUP", SIGHUP},   {"SIGINT", SIGINT},   {"SIGQUIT", SIGQUIT},
                                               {"SIGKILL", SIGKILL}, {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2},
                                               {"SIGTERM", SIGTERM}, {"SIGCONT", SIGCONT}, {"SIGSTOP", SIGSTOP}};
  for (const auto& [name, number] : names) {
    const Json body = {{"signal", name}};
    auto parsed = SignalFromJson(JsonView(body, "body"));
    ASSERT_TRUE(parsed.ok()) << name;
    EXPECT_EQ(*parsed, number) << name;
  }
  const Json one = {{"signal", 1}};
  EXPECT_EQ(*SignalFromJson(JsonView(one, "body")), 1);
  const Json bad = {{"signal", "SIGPWR"}};
  EXPECT_EQ(SignalFromJson(JsonView(bad, "body")).status().message(),
            "body.signal: unknown signal name \"SIGPWR\" (expected one of SIGHUP, SIGINT, SIGQUIT, SIGKILL, "
            "SIGUSR1, SIGUSR2, SIGTERM, SIGCONT, SIGSTOP, or a number 1..64)");
  EXPECT_EQ(SignalToJson(SIGHUP), Json({{"signal", SIGHUP}}));
}

TEST(ApiWireMutantsTest, EveryEventKind) {
  EventPage page;
  const EventKind kinds[] = {EventKind::kCreated, EventKind::kDestroyed,    EventKind::kOom,
                             EventKind::kInitExit, EventKind::kRootfsDamage, EventKind::kTimeout};
  for (EventKind kind : kinds) {
    SandboxEvent event;
    event.seq = page.events.size() + 10;
    event.kind = kind;
    event.time = std::chrono::system_clock::time_point(std::chrono::milliseconds(-5 + 10 * event.seq));
    page.events.push_back(event);
  }
  const Json wire = EventPageToJson(page);
  EXPECT_EQ(wire["closed"], false);
  EXPECT_EQ(wire["cursor"], 0u);
  EXPECT_EQ(wire["events"][0]["time_ms"], 95);
  auto back = EventPageFromJson(JsonView(wire, "reply"), "fr-9");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->events.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(back->events[i].kind, kinds[i]) << i;
    EXPECT_EQ(back->events[i].seq, i + 10);
    EXPECT_EQ(back->events[i].detail, "");
    EXPECT_EQ(back->events[i].time, page.events[i].time);
  }
  EXPECT_FALSE(back->closed);
  const Json no_cursor = {{"events", Json::array()}};
  EXPECT_FALSE(EventPageFromJson(JsonView(no_cursor, "reply"), "x").ok());
  const Json no_events = {{"cursor", 1}};
  EXPECT_FALSE(EventPageFromJson(JsonView(no_events, "reply"), "x").ok());
  const Json defaults = {{"cursor", 4}, {"events", Json::array({Json{{"seq", 1}, {"kind", "oom"}}})}};
  auto d = EventPageFromJson(JsonView(defaults, "reply"), "x");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->next_cursor, 4u);
  EXPECT_EQ(d->events[0].time.time_since_epoch().count(), 0);
  EXPECT_EQ(d->events[0].sandbox_id, "x");
}

}  // namespace
}  // namespace flashroll::sandbox::api
