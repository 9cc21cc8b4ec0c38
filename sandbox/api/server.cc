#include "sandbox/api/server.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>

#include "common/log.h"
#include "sandbox/api/directory.h"
#include "sandbox/api/stream_exec.h"
#include "sandbox/api/wire.h"
#include "common/sha256.h"

namespace flashroll::sandbox::api {

namespace {

using Clock = std::chrono::steady_clock;

Result<std::string> RequiredPath(const HttpRequest& request) {
  auto path = request.Query("path");
  if (!path || path->empty()) return Status::InvalidArgument("query parameter \"path\": missing");
  if ((*path)[0] != '/') {
    return Status::InvalidArgument("query parameter \"path\": must be absolute, got \"" + *path + "\"");
  }
  return *path;
}

Result<mode_t> ModeParam(const HttpRequest& request) {
  auto text = request.Query("mode");
  if (!text) return mode_t{0644};
  char* end = nullptr;
  const unsigned long mode = std::strtoul(text->c_str(), &end, 8);
  if (text->empty() || *end != '\0' || mode > 07777) {
    return Status::InvalidArgument("query parameter \"mode\": expected octal permission bits, got \"" + *text +
                                   "\"");
  }
  return static_cast<mode_t>(mode);
}

// A non-negative integer query parameter; 0 when absent.
Result<uint64_t> NumberParam(const HttpRequest& request, const char* name) {
  auto text = request.Query(name);
  if (!text) return uint64_t{0};
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text->c_str(), &end, 10);
  if (text->empty() || !std::isdigit(static_cast<unsigned char>((*text)[0])) || *end != '\0') {
    return Status::InvalidArgument(std::string("query parameter \"") + name + "\": expected a number, got \"" +
                                   *text + "\"");
  }
  return static_cast<uint64_t>(value);
}

// The longest wait_ms an events request may ask for: below the server's
// and clients' read timeouts.
constexpr uint64_t kMaxEventWaitMs = 20000;

HttpResponse JsonReply(const Json& value, int status = 200) {
  HttpResponse reply;
  reply.status = status;
  reply.content_type = "application/json";
  reply.body = DumpJson(value);
  return reply;
}

// A sandbox a request names by its public id, resolved for its client.
struct Owned {
  std::string id;        // public, as the client knows it
  std::string internal;  // the Manager's

  // The Manager's errors name its id; the client sees its own.
  Status Public(const Status& status) const {
    if (status.ok()) return status;
    std::string message = status.message();
    for (size_t at = message.find(internal); at != std::string::npos; at = message.find(internal, at + id.size())) {
      message.replace(at, internal.size(), id);
    }
    return Status(status.code(), message);
  }
  template <typename T>
  Result<T> Public(Result<T> result) const {
    if (result.ok()) return result;
    return Public(result.status());
  }
};

Result<Owned> OwnedSandbox(SandboxDirectory& directory, const HttpRequest& request, bool any_owner = false) {
  const std::string& id = request.Param("id");
  FR_ASSIGN_OR_RETURN(std::string internal, directory.Resolve(request.client, id, any_owner));
  return Owned{id, std::move(internal)};
}

// What identifies a create request for its idempotency key: the digest of
// its body as parsed (keys in order, so spacing and key order do not count).
std::string SpecDigest(const Json& body) {
  Sha256 digest;
  const std::string text = DumpJson(body);
  digest.Update(text.data(), text.size());
  Result<std::string> hex = digest.HexDigest();
  return hex.ok() ? *hex : text;  // the text itself identifies it as well
}

// Counts a failed request on `op` and passes the result through.
template <typename T>
T Counted(ApiMetrics& metrics, ApiOp op, T result) {
  if (!result.ok()) metrics.RecordFailure(op);
  return result;
}

}  // namespace

SandboxServer::SandboxServer(Manager* manager, NodePolicy policy, HttpServerOptions options)
    : manager_(manager), policy_(std::move(policy)), directory_(manager), http_([&] {
        options.name = "sandboxd";
        // When every worker holds a connection, others get a 429 at once,
        // and the health check and metrics still answer.
        options.refuse_when_busy = true;
        options.reserved_paths = {"/health", "/metrics"};
        return std::move(options);
      }()) {
  AddRoutes();
}

SandboxServer::~SandboxServer() { Stop(); }

Status SandboxServer::Start() {
  if (const size_t adopted = directory_.AdoptOrphans(); adopted > 0) {
    log::Info("sandboxd adopted the sandboxes a sandboxd before it kept", {{"sandboxes", static_cast<int64_t>(adopted)}});
  }
  return http_.Start();
}
void SandboxServer::Stop() { http_.Stop(); }

void SandboxServer::AddRoutes() {
  Manager* m = manager_;
  ApiMetrics* metrics = &metrics_;
  const NodePolicy* policy = &policy_;
  SandboxDirectory* directory = &directory_;

  http_.HandleJson(
      HttpMethod::kPost, "/v1/sandboxes",
      [directory, metrics, policy](const HttpRequest& request) -> Result<Json> {
        return Counted(*metrics, ApiOp::kCreate, [&]() -> Result<Json> {
          FR_ASSIGN_OR_RETURN(SpecRequest asked, SpecRequestFromJson(request.Body()));
          const ClientGrant grant = request.every_scope ? ClientGrant{} : GrantOf(request.scopes);
          FR_ASSIGN_OR_RETURN(SandboxSpec spec, AdmitSpec(*policy, std::move(asked), request.Body().path(), grant));
          const std::string key =
              request.Header("Idempotency-Key").value_or(request.Query("client_key").value_or(""));
          FR_ASSIGN_OR_RETURN(std::string id, directory->Create(request.client, spec, SpecDigest(request.json), key));
          metrics->RecordCreate();
          return Json{{"id", id}};
        }());
      },
      201, kScopeCreate);

  // A client's own sandboxes; an admin's list has every one, with owners.
  http_.HandleJson(HttpMethod::kGet, "/v1/sandboxes", [directory](const HttpRequest& request) -> Result<Json> {
    const bool admin = request.Holds(kScopeAdmin);
    if (!admin && !request.Holds(kScopeCreate) && !request.Holds(kScopeExec)) {
      return Status::PermissionDenied("token \"" + request.client +
                                      "\" holds none of the scopes create, exec, admin that GET /v1/sandboxes needs");
    }
    Json list = Json::array();
    for (const auto& [id, owner] : directory->List(request.client, admin)) {
      list.push_back(admin ? Json{{"id", id}, {"owner", owner}} : Json{{"id", id}});
    }
    return Json{{"sandboxes", list}};
  });

  http_.HandleRaw(HttpMethod::kPost, "/v1/sandboxes/:id/exec",
                  [m, metrics, policy, directory](const HttpRequest& request) -> Result<HttpResponse> {
                    return Counted(*metrics, ApiOp::kExec, [&]() -> Result<HttpResponse> {
                      FR_ASSIGN_OR_RETURN(Owned sandbox, OwnedSandbox(*directory, request));
                      FR_ASSIGN_OR_RETURN(Json body, request.ParseJsonBody());
                      FR_ASSIGN_OR_RETURN(ExecCall call, AdmitExec(*policy, JsonView(body, "body")));
                      const auto start = Clock::now();
                      FR_ASSIGN_OR_RETURN(ExecResult result,
                                          sandbox.Public(m->Exec(sandbox.internal, BufferedRequest(call))));
                      metrics->RecordExec(std::chrono::duration<double>(Clock::now() - start).count());
                      return JsonReply(ExecResultToJson(result));
                    }());
                  }, kScopeExec);

  http_.HandleStream(
      HttpMethod::kPost, "/v1/sandboxes/:id/exec/stream",
      [m, metrics, policy, directory](const HttpRequest& request) -> Result<StreamResponse> {
        return Counted(*metrics, ApiOp::kExec, [&]() -> Result<StreamResponse> {
          FR_ASSIGN_OR_RETURN(Owned sandbox, OwnedSandbox(*directory, request));
          FR_ASSIGN_OR_RETURN(Json body, request.ParseJsonBody());
          FR_ASSIGN_OR_RETURN(ExecCall call, AdmitExec(*policy, JsonView(body, "body")));
          // Unknown and frozen sandboxes get a proper error status before
          // the 200 of the stream goes out.
          FR_ASSIGN_OR_RETURN(SandboxInfo info, sandbox.Public(m->Info(sandbox.internal)));
          FR_RETURN_IF_ERROR(CheckVerb(info.state, Verb::kExec, sandbox.id));
          StreamResponse reply;
          reply.content_type = "application/x-ndjson";
          reply.produce = [m, metrics, sandbox, call](ChunkWriter& writer) -> Status {
            const auto start = Clock::now();
            Result<ExecResult> result = sandbox.Public(
                StreamExec(*m, sandbox.internal, call, [&](OutputStream stream, std::string_view data) {
                  const Json line = {{"stream", stream == OutputStream::kStdout ? "stdout" : "stderr"},
                                     {"data", std::string(data)}};
                  return writer.Write(DumpJson(line) + "\n");
                }));
            if (!result.ok()) {
              metrics->RecordFailure(ApiOp::kExec);
              writer.Write(DumpJson(Json{{"error", ErrorJson(result.status())["error"]}}) + "\n");
              return Status::Ok();
            }
            metrics->RecordExec(std::chrono::duration<double>(Clock::now() - start).count());
            if (!writer.Write(DumpJson(Json{{"result", ExecResultToJson(*result)}}) + "\n")) {
              return Status::Unavailable("exec stream: the client went away");
            }
            return Status::Ok();
          };
          return reply;
        }());
      }, kScopeExec);

  http_.HandleJson(HttpMethod::kPost, "/v1/sandboxes/:id/signal",
                   [m, metrics, directory](const HttpRequest& request) -> Result<Json> {
                     return Counted(*metrics, ApiOp::kSignal, [&]() -> Result<Json> {
                       FR_ASSIGN_OR_RETURN(Owned sandbox, OwnedSandbox(*directory, request));
                       FR_ASSIGN_OR_RETURN(int signal, SignalFromJson(request.Body()));
                       FR_RETURN_IF_ERROR(sandbox.Public(m->Signal(sandbox.internal, signal)));
                       return Json{{"id", sandbox.id}, {"signal", signal}};
                     }());
                   }, 200, kScopeExec);

  http_.HandleRaw(HttpMethod::kPut, "/v1/sandboxes/:id/files",
                  [m, metrics, directory](const HttpRequest& request) -> Result<HttpResponse> {
                    return Counted(*metrics, ApiOp::kFiles, [&]() -> Result<HttpResponse> {
                      FR_ASSIGN_OR_RETURN(Owned sandbox, OwnedSandbox(*directory, request));
                      FR_ASSIGN_OR_RETURN(std::string path, RequiredPath(request));
                      FR_ASSIGN_OR_RETURN(mode_t mode, ModeParam(request));
                      FR_RETURN_IF_ERROR(sandbox.Public(m->PutFile(sandbox.internal, path, request.body, mode)));
                      return JsonReply(Json{{"path", path}, {"bytes", request.body.size()}});
                    }());
                  }, kScopeFiles);

  http_.HandleRaw(HttpMethod::kGet, "/v1/sandboxes/:id/files",
                  [m, metrics, directory](const HttpRequest& request) -> Result<HttpResponse> {
                    return Counted(*metrics, ApiOp::kFiles, [&]() -> Result<HttpResponse> {
                      FR_ASSIGN_OR_RETURN(Owned sandbox, OwnedSandbox(*directory, request));
                      FR_ASSIGN_OR_RETURN(std::string path, RequiredPath(request));
                      FR_ASSIGN_OR_RETURN(std::string data, sandbox.Public(m->GetFile(sandbox.internal, path)));
                      HttpResponse reply;
                      reply.body = std::move(data);
                      return reply;
                    }());
                  }, kScopeFiles);

  http_.HandleJson(HttpMethod::kPost, "/v1/sandboxes/:id/freeze",
                   [m, metrics, directory](const HttpRequest& request) -> Result<Json> {
                     return Counted(*metrics, ApiOp::kFreeze, [&]() -> Result<Json> {
                       FR_ASSIGN_OR_RETURN(Owned sandbox, OwnedSandbox(*directory, request));
                       FR_RETURN_IF_ERROR(sandbox.Public(m->Freeze(sandbox.internal)));
                       return Json{{"id", sandbox.id}, {"state", "frozen"}};
                     }());
                   }, 200, kScopeExec);

  http_.HandleJson(HttpMethod::kPost, "/v1/sandboxes/:id/thaw",
                   [m, metrics, directory](const HttpRequest& request) -> Result<Json> {
                     return Counted(*metrics, ApiOp::kThaw, [&]() -> Result<Json> {
                       FR_ASSIGN_OR_RETURN(Owned sandbox, OwnedSandbox(*directory, request));
                       FR_RETURN_IF_ERROR(sandbox.Public(m->Thaw(sandbox.internal)));
                       return Json{{"id", sandbox.id}, {"state", "running"}};
                     }());
                   }, 200, kScopeExec);

  // The owner (exec scope) deletes its sandboxes; an admin any.
  http_.HandleJson(HttpMethod::kDelete, "/v1/sandboxes/:id",
                   [m, metrics, directory](const HttpRequest& request) -> Result<Json> {
                     return Counted(*metrics, ApiOp::kDestroy, [&]() -> Result<Json> {
                       const bool admin = request.Holds(kScopeAdmin);
                       if (!admin && !request.Holds(kScopeExec)) {
                         return Status::PermissionDenied("token \"" + request.client +
                                                         "\" holds neither the scope exec nor admin that DELETE "
                                                         "/v1/sandboxes/:id needs");
                       }
                       FR_ASSIGN_OR_RETURN(Owned sandbox, OwnedSandbox(*directory, request, admin));
                       // The entry stays while the Manager keeps the
                       // sandbox's events (readable after the destroy).
                       FR_RETURN_IF_ERROR(sandbox.Public(m->Destroy(sandbox.internal)));
                       metrics->RecordDestroy();
                       return Json{{"id", sandbox.id}, {"destroyed", true}};
                     }());
                   });

  http_.HandleJson(HttpMethod::kGet, "/v1/sandboxes/:id/events",
                   [m, metrics, directory](const HttpRequest& request) -> Result<Json> {
                     return Counted(*metrics, ApiOp::kEvents, [&]() -> Result<Json> {
                       FR_ASSIGN_OR_RETURN(Owned sandbox, OwnedSandbox(*directory, request));
                       FR_ASSIGN_OR_RETURN(uint64_t cursor, NumberParam(request, "cursor"));
                       FR_ASSIGN_OR_RETURN(uint64_t wait_ms, NumberParam(request, "wait_ms"));
                       wait_ms = std::min(wait_ms, kMaxEventWaitMs);
                       Result<EventPage> page =
                           wait_ms > 0
                               ? m->WaitEvents(sandbox.internal, cursor, std::chrono::milliseconds(wait_ms))
                               : m->EventsSince(sandbox.internal, cursor);
                       FR_RETURN_IF_ERROR(sandbox.Public(page.status()));
                       return EventPageToJson(*page);
                     }());
                   }, 200, kScopeExec);

  AddWorkspaceRoutes();

  http_.HandlePublicJson(HttpMethod::kGet, "/health", [](const HttpRequest&) -> Result<Json> {
    return Json{{"status", "ok"}};
  });

  http_.HandleRaw(HttpMethod::kGet, "/metrics", [m, metrics](const HttpRequest&) -> Result<HttpResponse> {
    HttpResponse reply;
    reply.content_type = "text/plain; version=0.0.4";
    reply.body = metrics->Render(m->List().size()) + RenderTeardownMetrics(m->teardown_stats());
    return reply;
  }, kScopeAdmin);
}

// Workspace disks are the node's, made and removed by an admin; any token
// that may create sandboxes may see them (what to bind, how full).
void SandboxServer::AddWorkspaceRoutes() {
  const NodePolicy* policy = &policy_;
  const auto disks = [policy]() -> Result<WorkspaceDisks*> {
    if (!policy->workspace_disks) {
      return Status::FailedPrecondition("this node has no workspace disks (its config has no workspace_root, or "
                                        "workspace_disks: false)");
    }
    return policy->workspace_disks.get();
  };
  http_.HandleJson(HttpMethod::kPost, "/v1/workspaces", [policy, disks](const HttpRequest& request) -> Result<Json> {
    FR_ASSIGN_OR_RETURN(WorkspaceDisks* workspaces, disks());
    FR_ASSIGN_OR_RETURN(WorkspaceRequest asked, WorkspaceRequestFromJson(request.Body()));
    FR_RETURN_IF_ERROR(CheckWorkspaceName(asked.name, "body.name"));
    // As a sandbox's disk: left out, the default, else the maximum.
    if (asked.disk_bytes == 0) asked.disk_bytes = policy->defaults.disk_bytes;
    if (asked.disk_bytes == 0) asked.disk_bytes = policy->max.disk_bytes;
    if (asked.disk_bytes == 0) {
      return Status::InvalidArgument("body.disk: the workspace's size is needed (this node has no default or "
                                     "maximum disk)");
    }
    if (policy->max.disk_bytes != 0 && asked.disk_bytes > policy->max.disk_bytes) {
      return Status::PermissionDenied("body.disk: " + std::to_string(asked.disk_bytes) +
                                      " bytes is above this node's maximum of " +
                                      std::to_string(policy->max.disk_bytes));
    }
    if (workspaces->List().size() >= policy->max_workspaces) {
      return Status::ResourceExhausted("this node holds its maximum of " + std::to_string(policy->max_workspaces) +
                                       " workspace disks (max_workspaces)");
    }
    FR_ASSIGN_OR_RETURN(WorkspaceDisk made, workspaces->Create(asked.name, asked.disk_bytes));
    return WorkspaceToJson(made);
  }, 201, kScopeAdmin);
  const auto may_see = [](const HttpRequest& request) -> Status {
    if (request.Holds(kScopeAdmin) || request.Holds(kScopeCreate)) return Status::Ok();
    return Status::PermissionDenied("token \"" + request.client +
                                    "\" holds neither the scope create nor admin that GET /v1/workspaces needs");
  };
  http_.HandleJson(HttpMethod::kGet, "/v1/workspaces", [disks, may_see](const HttpRequest& request) -> Result<Json> {
    FR_RETURN_IF_ERROR(may_see(request));
    FR_ASSIGN_OR_RETURN(WorkspaceDisks* workspaces, disks());
    Json list = Json::array();
    for (const WorkspaceDisk& disk : workspaces->List()) list.push_back(WorkspaceToJson(disk));
    return Json{{"workspaces", list}};
  });
  http_.HandleJson(HttpMethod::kGet, "/v1/workspaces/:name",
                   [disks, may_see](const HttpRequest& request) -> Result<Json> {
                     FR_RETURN_IF_ERROR(may_see(request));
                     FR_ASSIGN_OR_RETURN(WorkspaceDisks* workspaces, disks());
                     FR_ASSIGN_OR_RETURN(WorkspaceDisk disk, workspaces->Get(request.Param("name")));
                     return WorkspaceToJson(disk);
                   });
  http_.HandleJson(HttpMethod::kDelete, "/v1/workspaces/:name", [disks](const HttpRequest& request) -> Result<Json> {
    FR_ASSIGN_OR_RETURN(WorkspaceDisks* workspaces, disks());
    FR_RETURN_IF_ERROR(workspaces->Remove(request.Param("name")));
    return Json{{"name", request.Param("name")}, {"removed", true}};
  }, 200, kScopeAdmin);
}

}  // namespace flashroll::sandbox::api
