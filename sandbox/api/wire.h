// The sandbox API's wire format: SandboxSpec, exec requests and exec results
// as JSON, converted at the edge into the typed structs of spec.h and
// sandbox.h. Parse errors are kInvalidArgument naming the field
// ("body.memory: ...", "body: unknown field \"imgae\"").
//
// Spec fields (all optional): image ("host", "busybox" or an absolute
// directory), net ("none" | "policy"), allow (["IP[/N]:PORT", ...]), memory
// and disk (bytes as a number or "256M"), pids, cpus, cpuset, rw_paths,
// hostname, env (["K=V", ...]), ttl (milliseconds as a number or "10s").
//
// Exec request fields: cmd (required, non-empty string array), env, cwd,
// timeout (as ttl), max_output_bytes.
//
// A signal request: {"signal": "SIGTERM"} or {"signal": 15}; the names
// SIGHUP, SIGINT, SIGQUIT, SIGKILL, SIGUSR1, SIGUSR2, SIGTERM, SIGCONT and
// SIGSTOP, or a number 1..64.
//
// An event page: {"events": [{"seq", "kind", "detail", "time_ms"}, ...],
// "cursor": next cursor, "closed": bool}, kind as EventKindName.
//
// Thread safety: free functions on values; reentrant.
#pragma once

#include <string>

#include "common/json.h"
#include "common/status.h"
#include "sandbox/events.h"
#include "sandbox/sandbox.h"
#include "sandbox/spec.h"

namespace flashroll::sandbox::api {

// The request body of POST /v1/sandboxes into a validated spec. A null
// body is the default spec. Returns kInvalidArgument naming the field.
Result<SandboxSpec> SpecFromJson(const JsonView& body);

// The spec as SpecFromJson reads it (the inverse, for clients).
Json SpecToJson(const SandboxSpec& spec);

// What an exec asks for, without the pass-through descriptors.
struct ExecCall {
  std::vector<std::string> argv;
  std::vector<std::string> env;  // empty: the sandbox's default environment
  std::string cwd = "/";
  std::chrono::milliseconds timeout{0};  // 0: none
  size_t max_output_bytes = size_t{16} << 20;
};

Result<ExecCall> ExecCallFromJson(const JsonView& body);
Json ExecCallToJson(const ExecCall& call);

// stdout and stderr travel as JSON strings: bytes that are not UTF-8 are
// replaced by U+FFFD (use the files API for binary output).
Json ExecResultToJson(const ExecResult& result);
Result<ExecResult> ExecResultFromJson(const JsonView& body);

// The signal number of a signal request; kInvalidArgument naming the field
// and value ("body.signal: unknown signal name \"SIGFOO\"").
Result<int> SignalFromJson(const JsonView& body);
Json SignalToJson(int signal);

Json EventPageToJson(const EventPage& page);
// `id` fills each event's sandbox_id (the wire form leaves it out).
Result<EventPage> EventPageFromJson(const JsonView& body, const std::string& id);

}  // namespace flashroll::sandbox::api
