// The sandbox API's wire format: SandboxSpec, exec requests and exec results
// as JSON, converted at the edge into the typed structs of spec.h and
// sandbox.h. Parse errors are kInvalidArgument naming the field
// ("body.memory: ...", "body: unknown field \"imgae\"").
//
// Spec fields (all optional): image ("host", "busybox", an absolute
// directory for SpecFromJson, an image name for the node API), net ("none" | "policy"), allow (["IP[/N]:PORT", ...]), memory
// and disk (bytes as a number or "256M"), pids, cpus, cpuset, rw_paths,
// hostname, env (["K=V", ...]), ttl (milliseconds as a number or "10s"),
// seccomp ("default", a profile file or, on the node API, a profile name),
// user and group (every exec's default user: a name or a number; where
// neither is given, an OCI image's config User), workdir (every exec's
// default cwd, absolute; where not given, an OCI image's WorkingDir).
// A memory, pids, cpus or disk of 0 is the same as none given.
//
// Exec request fields: cmd (required, non-empty string array), env, cwd
// (absolute; absent: the sandbox's workdir, else "/"),
// user and group (a name or a number; ExecRequest::user), timeout (as ttl),
// max_output_bytes.
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
#include "sandbox/workspace_disks.h"
#include "sandbox/events.h"
#include "sandbox/sandbox.h"
#include "sandbox/spec.h"

namespace flashroll::sandbox::api {

// A create request parsed but not yet resolved: the image as named, and
// every other field in `spec` as sent (seccomp and rw_paths as text; the
// memory, pids, cpus and disk limits 0 where the request gives none). The
// node API admits it through its policy (policy.h); nothing here touches
// the file system.
struct SpecRequest {
  SpecRequest() { spec.disk_bytes = 0; }

  std::string image = "host";
  SandboxSpec spec;
};

// The request body of POST /v1/sandboxes, checked for types and syntax
// only. A null body is the default request. Returns kInvalidArgument naming
// the field.
Result<SpecRequest> SpecRequestFromJson(const JsonView& body);

// SpecRequestFromJson, then the image resolved as ParseImage reads it (any
// host directory) and the spec validated: the spec of an in-process caller
// that may use any host path. A null body is the default spec. Returns
// kInvalidArgument naming the field.
Result<SandboxSpec> SpecFromJson(const JsonView& body);

// The spec as SpecFromJson reads it (the inverse, for clients).
Json SpecToJson(const SandboxSpec& spec);

// What an exec asks for, without the pass-through descriptors.
struct ExecCall {
  std::vector<std::string> argv;
  std::vector<std::string> env;  // empty: the sandbox's default environment
  std::string cwd;               // empty: the sandbox's default (ExecRequest::cwd)
  std::string user;   // empty: the sandbox's default (ExecRequest::user)
  std::string group;
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

// POST /v1/workspaces: {"name": "ws1", "disk": "256M" | bytes}; a disk
// left out (or 0) is the node's default.
struct WorkspaceRequest {
  std::string name;
  uint64_t disk_bytes = 0;
};
Result<WorkspaceRequest> WorkspaceRequestFromJson(const JsonView& body);
// {"name", "path", "disk", "used", "inodes", "used_inodes"}
Json WorkspaceToJson(const WorkspaceDisk& disk);
// `id` fills each event's sandbox_id (the wire form leaves it out).
Result<EventPage> EventPageFromJson(const JsonView& body, const std::string& id);

}  // namespace flashroll::sandbox::api
