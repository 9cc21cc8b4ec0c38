#include "sandbox/api/wire.h"

#include <signal.h>

#include <algorithm>

#include "common/config.h"

namespace flashroll::sandbox::api {

namespace {

// A byte size given as a number of bytes or as text such as "256M".
Result<uint64_t> ByteSizeField(const JsonView& body, std::string_view key, uint64_t fallback) {
  if (!body.Has(key)) return fallback;
  FR_ASSIGN_OR_RETURN(JsonView field, body.Get(key));
  if (field.value().is_null()) return fallback;
  if (field.value().is_string()) {
    FR_ASSIGN_OR_RETURN(std::string text, field.AsString());
    auto bytes = ParseByteSize(text);
    if (!bytes.ok()) return bytes.status().Wrap(field.path());
    return *bytes;
  }
  return field.AsUint();
}

// A duration given as milliseconds or as text such as "10s".
Result<std::chrono::milliseconds> DurationField(const JsonView& body, std::string_view key) {
  if (!body.Has(key)) return std::chrono::milliseconds(0);
  FR_ASSIGN_OR_RETURN(JsonView field, body.Get(key));
  if (field.value().is_null()) return std::chrono::milliseconds(0);
  if (field.value().is_string()) {
    FR_ASSIGN_OR_RETURN(std::string text, field.AsString());
    auto ms = ParseDuration(text);
    if (!ms.ok()) return ms.status().Wrap(field.path());
    return *ms;
  }
  FR_ASSIGN_OR_RETURN(uint64_t ms, field.AsUint());
  return std::chrono::milliseconds(static_cast<int64_t>(ms));
}

Result<std::vector<std::string>> StringArrayField(const JsonView& body, std::string_view key) {
  if (!body.Has(key)) return std::vector<std::string>{};
  FR_ASSIGN_OR_RETURN(JsonView field, body.Get(key));
  if (field.value().is_null()) return std::vector<std::string>{};
  return field.AsStringArray();
}

// An exec user or group: a name or a number (JSON string or integer).
Result<std::string> UserField(const JsonView& body, const char* key) {
  if (!body.Has(key)) return std::string();
  FR_ASSIGN_OR_RETURN(JsonView field, body.Get(key));
  std::string value;
  if (field.value().is_number_integer()) {
    if (field.value().is_number_unsigned() || field.value().get<int64_t>() >= 0) {
      value = std::to_string(field.value().get<uint64_t>());
    } else {
      return Status::InvalidArgument(field.path() + ": a uid or gid may not be negative");
    }
  } else {
    FR_ASSIGN_OR_RETURN(value, field.AsString());
  }
  if (Status s = CheckExecUser(key, value); !s.ok()) return s.Wrap(body.path());
  return value;
}

}  // namespace

Result<SpecRequest> SpecRequestFromJson(const JsonView& body) {
  SpecRequest request;
  SandboxSpec& spec = request.spec;
  if (body.value().is_null()) return request;
  FR_RETURN_IF_ERROR(body.ExpectOnlyKeys({"image", "net", "allow", "memory", "pids", "cpus", "cpuset", "disk",
                                          "rw_paths", "hostname", "env", "ttl", "seccomp", "user", "group",
                                          "workdir"}));
  FR_ASSIGN_OR_RETURN(request.image, body.GetString("image", request.image));
  FR_ASSIGN_OR_RETURN(std::string net, body.GetString("net", "none"));
  auto mode = ParseNetMode(net);
  if (!mode.ok()) return mode.status().Wrap(body.path() + ".net");
  spec.net = *mode;
  FR_ASSIGN_OR_RETURN(std::vector<std::string> allow, StringArrayField(body, "allow"));
  for (size_t i = 0; i < allow.size(); ++i) {
    auto rule = ParseAllowRule(allow[i]);
    if (!rule.ok()) return rule.status().Wrap(body.path() + ".allow[" + std::to_string(i) + "]");
    spec.allow.push_back(*rule);
  }
  FR_ASSIGN_OR_RETURN(spec.memory_bytes, ByteSizeField(body, "memory", 0));
  FR_ASSIGN_OR_RETURN(spec.disk_bytes, ByteSizeField(body, "disk", 0));
  FR_ASSIGN_OR_RETURN(spec.pids, body.GetInt("pids", 0));
  FR_ASSIGN_OR_RETURN(spec.cpus, body.GetDouble("cpus", 0));
  FR_ASSIGN_OR_RETURN(spec.cpuset, body.GetString("cpuset", ""));
  FR_ASSIGN_OR_RETURN(spec.rw_paths, StringArrayField(body, "rw_paths"));
  FR_ASSIGN_OR_RETURN(spec.hostname, body.GetString("hostname", spec.hostname));
  if (body.Has("env")) {
    FR_ASSIGN_OR_RETURN(spec.env, StringArrayField(body, "env"));
  }
  FR_ASSIGN_OR_RETURN(spec.ttl, DurationField(body, "ttl"));
  FR_ASSIGN_OR_RETURN(spec.seccomp, body.GetString("seccomp", spec.seccomp));
  FR_ASSIGN_OR_RETURN(spec.user, UserField(body, "user"));
  FR_ASSIGN_OR_RETURN(spec.group, UserField(body, "group"));
  FR_ASSIGN_OR_RETURN(spec.workdir, body.GetString("workdir", ""));
  if (Status s = CheckWorkdir(body.path() + ".workdir", spec.workdir); !s.ok()) return s;
  return request;
}

Result<SandboxSpec> SpecFromJson(const JsonView& body) {
  FR_ASSIGN_OR_RETURN(SpecRequest request, SpecRequestFromJson(body));
  SandboxSpec spec = std::move(request.spec);
  if (spec.disk_bytes == 0) spec.disk_bytes = SandboxSpec().disk_bytes;
  if (Status s = ParseImage(request.image, &spec); !s.ok()) return s.Wrap(body.path() + ".image");
  if (Status s = ValidateSpec(spec); !s.ok()) return s.Wrap(body.path());
  return spec;
}

Json SpecToJson(const SandboxSpec& spec) {
  Json out = Json::object();
  switch (spec.image) {
    case ImageKind::kHost:
      out["image"] = "host";
      break;
    case ImageKind::kBusybox:
      out["image"] = "busybox";
      break;
    case ImageKind::kDirectory:
      out["image"] = spec.image_ref.empty() ? spec.image_dir : spec.image_dir + ":" + spec.image_ref;
      break;
  }
  out["net"] = spec.net == NetMode::kPolicy ? "policy" : "none";
  Json allow = Json::array();
  for (const auto& rule : spec.allow) allow.push_back(rule.text);
  out["allow"] = allow;
  out["memory"] = spec.memory_bytes;
  out["disk"] = spec.disk_bytes;
  out["pids"] = spec.pids;
  out["cpus"] = spec.cpus;
  out["cpuset"] = spec.cpuset;
  out["rw_paths"] = spec.rw_paths;
  out["hostname"] = spec.hostname;
  out["env"] = spec.env;
  // Unsigned, as JsonView::AsUint reads it (a signed JSON integer is refused).
  out["ttl"] = static_cast<uint64_t>(std::max<int64_t>(0, spec.ttl.count()));
  out["seccomp"] = spec.seccomp;
  if (!spec.user.empty()) out["user"] = spec.user;
  if (!spec.group.empty()) out["group"] = spec.group;
  if (!spec.workdir.empty()) out["workdir"] = spec.workdir;
  return out;
}

Result<ExecCall> ExecCallFromJson(const JsonView& body) {
  FR_RETURN_IF_ERROR(body.ExpectObject());
  FR_RETURN_IF_ERROR(body.ExpectOnlyKeys({"cmd", "env", "cwd", "user", "group", "timeout", "max_output_bytes"}));
  ExecCall call;
  FR_ASSIGN_OR_RETURN(call.argv, body.GetStringArray("cmd"));
  if (call.argv.empty()) return Status::InvalidArgument(body.path() + ".cmd: must not be empty");
  FR_ASSIGN_OR_RETURN(call.env, StringArrayField(body, "env"));
  // Absent: the sandbox's workdir (an OCI image's WorkingDir), else "/".
  if (body.Has("cwd")) {
    FR_ASSIGN_OR_RETURN(call.cwd, body.GetString("cwd"));
  }
  if (body.Has("cwd") && (call.cwd.empty() || call.cwd[0] != '/')) {
    return Status::InvalidArgument(body.path() + ".cwd: must be an absolute path, got \"" + call.cwd + "\"");
  }
  FR_ASSIGN_OR_RETURN(call.user, UserField(body, "user"));
  FR_ASSIGN_OR_RETURN(call.group, UserField(body, "group"));
  FR_ASSIGN_OR_RETURN(call.timeout, DurationField(body, "timeout"));
  FR_ASSIGN_OR_RETURN(uint64_t max_output, body.GetUint("max_output_bytes", call.max_output_bytes));
  call.max_output_bytes = static_cast<size_t>(max_output);
  return call;
}

Json ExecCallToJson(const ExecCall& call) {
  Json out = {{"cmd", call.argv}, {"max_output_bytes", call.max_output_bytes}};
  if (!call.cwd.empty()) out["cwd"] = call.cwd;
  if (!call.env.empty()) out["env"] = call.env;
  if (!call.user.empty()) out["user"] = call.user;
  if (!call.group.empty()) out["group"] = call.group;
  if (call.timeout.count() > 0) out["timeout"] = static_cast<uint64_t>(call.timeout.count());
  return out;
}

Json ExecResultToJson(const ExecResult& result) {
  return {{"exit_code", result.exit_code},
          {"signal", result.signal},
          {"timed_out", result.timed_out},
          {"cancelled", result.cancelled},
          {"oom_killed", result.oom_killed},
          {"start_errno", result.start_errno},
          {"stdout", result.stdout_data},
          {"stderr", result.stderr_data},
          {"output_truncated", result.output_truncated},
          {"duration_ms", result.duration_ms}};
}

Result<ExecResult> ExecResultFromJson(const JsonView& body) {
  FR_RETURN_IF_ERROR(body.ExpectObject());
  ExecResult result;
  FR_ASSIGN_OR_RETURN(int64_t exit_code, body.GetInt("exit_code"));
  result.exit_code = static_cast<int>(exit_code);
  FR_ASSIGN_OR_RETURN(int64_t signal, body.GetInt("signal", 0));
  result.signal = static_cast<int>(signal);
  FR_ASSIGN_OR_RETURN(result.timed_out, body.GetBool("timed_out", false));
  FR_ASSIGN_OR_RETURN(result.cancelled, body.GetBool("cancelled", false));
  FR_ASSIGN_OR_RETURN(result.oom_killed, body.GetBool("oom_killed", false));
  FR_ASSIGN_OR_RETURN(int64_t start_errno, body.GetInt("start_errno", 0));
  result.start_errno = static_cast<int>(start_errno);
  FR_ASSIGN_OR_RETURN(result.stdout_data, body.GetString("stdout", ""));
  FR_ASSIGN_OR_RETURN(result.stderr_data, body.GetString("stderr", ""));
  FR_ASSIGN_OR_RETURN(result.output_truncated, body.GetBool("output_truncated", false));
  FR_ASSIGN_OR_RETURN(result.duration_ms, body.GetDouble("duration_ms", 0));
  return result;
}

Result<int> SignalFromJson(const JsonView& body) {
  static constexpr struct {
    const char* name;
    int number;
  } kNames[] = {{"SIGHUP", SIGHUP},   {"SIGINT", SIGINT},   {"SIGQUIT", SIGQUIT},
                {"SIGKILL", SIGKILL}, {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2},
                {"SIGTERM", SIGTERM}, {"SIGCONT", SIGCONT}, {"SIGSTOP", SIGSTOP}};
  FR_RETURN_IF_ERROR(body.ExpectObject());
  FR_RETURN_IF_ERROR(body.ExpectOnlyKeys({"signal"}));
  FR_ASSIGN_OR_RETURN(JsonView field, body.Get("signal"));
  if (field.value().is_string()) {
    FR_ASSIGN_OR_RETURN(std::string name, field.AsString());
    for (const auto& known : kNames) {
      if (name == known.name) return known.number;
    }
    std::string expected;
    for (const auto& known : kNames) expected += std::string(expected.empty() ? "" : ", ") + known.name;
    return Status::InvalidArgument(field.path() + ": unknown signal name \"" + name + "\" (expected one of " +
                                   expected + ", or a number 1.." + std::to_string(Manager::kMaxSignal) + ")");
  }
  FR_ASSIGN_OR_RETURN(int64_t number, field.AsInt());
  if (number < 1 || number > Manager::kMaxSignal) {
    return Status::InvalidArgument(field.path() + ": " + std::to_string(number) + " is not a signal number (1.." +
                                   std::to_string(Manager::kMaxSignal) + ")");
  }
  return static_cast<int>(number);
}

Json SignalToJson(int signal) { return {{"signal", signal}}; }

Result<WorkspaceRequest> WorkspaceRequestFromJson(const JsonView& body) {
  FR_RETURN_IF_ERROR(body.ExpectOnlyKeys({"name", "disk"}));
  WorkspaceRequest request;
  FR_ASSIGN_OR_RETURN(JsonView name, body.Get("name"));
  FR_ASSIGN_OR_RETURN(request.name, name.AsString());
  FR_ASSIGN_OR_RETURN(request.disk_bytes, ByteSizeField(body, "disk", 0));
  return request;
}

Json WorkspaceToJson(const WorkspaceDisk& disk) {
  return Json{{"name", disk.name},           {"path", disk.path},     {"disk", disk.bytes},
              {"used", disk.used_bytes},     {"inodes", disk.inodes}, {"used_inodes", disk.used_inodes}};
}

Json EventPageToJson(const EventPage& page) {
  Json events = Json::array();
  for (const auto& event : page.events) {
    events.push_back({{"seq", event.seq},
                      {"kind", EventKindName(event.kind)},
                      {"detail", event.detail},
                      {"time_ms", std::chrono::duration_cast<std::chrono::milliseconds>(
                                      event.time.time_since_epoch())
                                      .count()}});
  }
  return {{"events", events}, {"cursor", page.next_cursor}, {"closed", page.closed}};
}

Result<EventPage> EventPageFromJson(const JsonView& body, const std::string& id) {
  static constexpr EventKind kKinds[] = {EventKind::kCreated, EventKind::kDestroyed,    EventKind::kOom,
                                         EventKind::kInitExit, EventKind::kRootfsDamage, EventKind::kTimeout,
                                         EventKind::kTeardownFailed};
  EventPage page;
  FR_ASSIGN_OR_RETURN(page.next_cursor, body.GetUint("cursor"));
  FR_ASSIGN_OR_RETURN(page.closed, body.GetBool("closed", false));
  FR_ASSIGN_OR_RETURN(std::vector<JsonView> events, body.GetArray("events"));
  for (const JsonView& item : events) {
    SandboxEvent event;
    event.sandbox_id = id;
    FR_ASSIGN_OR_RETURN(event.seq, item.GetUint("seq"));
    FR_ASSIGN_OR_RETURN(std::string kind, item.GetString("kind"));
    bool known = false;
    for (EventKind k : kKinds) {
      if (kind == EventKindName(k)) {
        event.kind = k;
        known = true;
      }
    }
    if (!known) return Status::InvalidArgument(item.path() + ".kind: unknown event kind \"" + kind + "\"");
    FR_ASSIGN_OR_RETURN(event.detail, item.GetString("detail", ""));
    FR_ASSIGN_OR_RETURN(int64_t time_ms, item.GetInt("time_ms", 0));
    event.time = std::chrono::system_clock::time_point(std::chrono::milliseconds(time_ms));
    page.events.push_back(std::move(event));
  }
  return page;
}

}  // namespace flashroll::sandbox::api
