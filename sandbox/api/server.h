// SandboxServer: the node agent's HTTP API over a Manager (what
// `flashroll sandboxd` serves).
//
// Every route needs a bearer token holding its scope (HttpCredential):
//
//   create  POST /v1/sandboxes
//   exec    exec, exec/stream, signal, freeze, thaw, DELETE and events of a
//           sandbox the token's client owns
//   files   GET and PUT of files
//   admin   GET /metrics (node-wide counts, no sandbox's data), the list
//           of every sandbox, DELETE of any
//
// A sandbox belongs to the client (token name) that created it: its id is
// random ("sb-" and 32 hex digits, directory.h) and every route of another
// client, whatever its scopes, answers 404 for it. A token with admin may
// list every sandbox (GET /v1/sandboxes, with owners) and delete any, but
// drives none it does not own (exec, files, signal, events). Idempotency
// keys are per client; one reused with a different spec is 409. Scopes
// image:NAME and workspace:NAME confine a token's creates (ClientGrant,
// policy.h); a token holding every scope (the bare bearer_token) is not. GET
// /health needs no token.
//
// Against clients without a token (common/http.h): tokens and scopes are
// checked on the headers before a body is read; headers and bodies have
// whole-phase deadlines; JSON bodies are bounded in size and depth; when
// every worker holds a connection, others get 429 while /health and
// /metrics are served by a reserved pool. An exec gets the node's timeout
// and output cap when it names none, and is refused above their maxima
// (policy.h): no exec holds a worker without bound.
//
//   POST   /v1/sandboxes                 body: spec (wire.h), admitted by
//                                        the node's policy (policy.h);
//                                        header Idempotency-Key (or query
//                                        client_key) makes it idempotent;
//                                        201 {"id": ...}
//   GET    /v1/sandboxes                 {"sandboxes": [{"id"}...]}: the
//                                        client's own; with admin every
//                                        one, with its "owner"
//   POST   /v1/sandboxes/{id}/exec       body: exec call; 200 exec result JSON
//   POST   /v1/sandboxes/{id}/exec/stream  the same, streamed as NDJSON lines
//          {"stream":"stdout"|"stderr","data":...} then one result line
//          {"result": {...}} (HttpServer routes pick the reply kind per
//          path, so streaming has its own path)
//   POST   /v1/sandboxes/{id}/signal     body {"signal": "SIGTERM"} or
//                                        {"signal": 15}: to the running
//                                        exec's process group; 409 when
//                                        none runs
//   PUT    /v1/sandboxes/{id}/files?path=P[&mode=0644]  body: the bytes
//   GET    /v1/sandboxes/{id}/files?path=P              reply: the bytes
//          (regular files only, read and written as the sandbox's user
//          in its namespaces: sandbox/file_access.h)
//   POST   /v1/sandboxes/{id}/freeze | /thaw
//   DELETE /v1/sandboxes/{id}
//   GET    /v1/sandboxes/{id}/events?cursor=N[&wait_ms=M]  repercussion
//          events after the cursor (wire.h); wait_ms (at most 20000)
//          blocks until a newer one comes
//   POST   /v1/workspaces                admin; body {"name", "disk"}: a
//                                        workspace disk (workspace_disks.h)
//                                        at <workspace_root>/<name>, its
//                                        disk within the node's limits;
//                                        201 {"name", "path", "disk",
//                                        "used", "inodes", "used_inodes"};
//                                        409 a taken name or a node without
//                                        workspace disks, 429 at
//                                        max_workspaces
//   GET    /v1/workspaces[/{name}]       create or admin: the same objects
//   DELETE /v1/workspaces/{name}         admin: unmounted (sandboxes that
//                                        bind it keep it until they exit)
//                                        and its image deleted
//   GET    /metrics                      Prometheus text
//   GET    /health                       {"status": "ok"}, no token needed
//
// Errors are common/http.h's JSON error bodies: 401 without or with an
// unknown token, 403 a token without the route's scope (naming it) or a
// create outside the node's policy (naming the field), 400 malformed JSON or a bad field (named) or a files path that is
// no regular file ("path /tmp/f: a fifo, not a regular file") or runs into
// a symlink loop, 403 a file the sandbox's user may not access, 404 unknown
// sandbox or file, 409 wrong state (e.g. exec while frozen, signal with no
// exec running), 413 oversized body, 504 a file operation past the
// manager's file_timeout.
//
// Thread safety: Start/Stop from one thread; requests are served
// concurrently on the HTTP server's workers.
#pragma once

#include <memory>
#include <string>

#include "common/http.h"
#include "common/status.h"
#include "sandbox/api/directory.h"
#include "sandbox/api/metrics.h"
#include "sandbox/api/policy.h"
#include "sandbox/sandbox.h"

namespace flashroll::sandbox::api {

// The scopes of HttpCredential::scopes that the routes above check.
inline constexpr char kScopeCreate[] = "create";
inline constexpr char kScopeExec[] = "exec";
inline constexpr char kScopeFiles[] = "files";
inline constexpr char kScopeAdmin[] = "admin";

class SandboxServer {
 public:
  // `manager` must outlive the server. Creates are admitted by `policy`;
  // `options` carries the credentials (a plain bearer_token holds every
  // scope) and TLS files.
  SandboxServer(Manager* manager, NodePolicy policy, HttpServerOptions options);
  ~SandboxServer();
  SandboxServer(const SandboxServer&) = delete;
  SandboxServer& operator=(const SandboxServer&) = delete;

  // Adopts the sandboxes a sandboxd before this one kept (with a Manager
  // that keeps sandboxes; SandboxDirectory::AdoptOrphans), then binds and
  // serves in the background; HttpServer::Start's errors.
  Status Start();
  // Stops serving (waits for requests in flight). Sandboxes stay alive.
  void Stop();

  int port() const { return http_.port(); }
  std::string base_url() const { return http_.base_url(); }
  const ApiMetrics& metrics() const { return metrics_; }
  // The Manager's id for a public id, whoever owns it (for the process
  // that holds the Manager, e.g. its tests); kNotFound when unknown.
  Result<std::string> ManagerId(const std::string& public_id) { return directory_.Resolve("", public_id, true); }

 private:
  void AddRoutes();
  void AddWorkspaceRoutes();

  Manager* manager_;
  const NodePolicy policy_;
  SandboxDirectory directory_;
  ApiMetrics metrics_;
  HttpServer http_;
};

}  // namespace flashroll::sandbox::api
