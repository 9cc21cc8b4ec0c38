#include "sandbox/api/server.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>

#include "sandbox/api/stream_exec.h"
#include "sandbox/api/wire.h"

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

// Counts a failed request on `op` and passes the result through.
template <typename T>
T Counted(ApiMetrics& metrics, ApiOp op, T result) {
  if (!result.ok()) metrics.RecordFailure(op);
  return result;
}

}  // namespace

SandboxServer::SandboxServer(Manager* manager, NodePolicy policy, HttpServerOptions options)
    : manager_(manager), policy_(std::move(policy)), http_([&] {
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

Status SandboxServer::Start() { return http_.Start(); }
void SandboxServer::Stop() { http_.Stop(); }

void SandboxServer::AddRoutes() {
  Manager* m = manager_;
  ApiMetrics* metrics = &metrics_;
  const NodePolicy* policy = &policy_;

  http_.HandleJson(
      HttpMethod::kPost, "/v1/sandboxes",
      [m, metrics, policy](const HttpRequest& request) -> Result<Json> {
        return Counted(*metrics, ApiOp::kCreate, [&]() -> Result<Json> {
          FR_ASSIGN_OR_RETURN(SpecRequest asked, SpecRequestFromJson(request.Body()));
          FR_ASSIGN_OR_RETURN(SandboxSpec spec, AdmitSpec(*policy, std::move(asked), request.Body().path()));
          const std::string key =
              request.Header("Idempotency-Key").value_or(request.Query("client_key").value_or(""));
          FR_ASSIGN_OR_RETURN(std::string id, m->Create(spec, key));
          metrics->RecordCreate();
          return Json{{"id", id}};
        }());
      },
      201, kScopeCreate);

  http_.HandleRaw(HttpMethod::kPost, "/v1/sandboxes/:id/exec",
                  [m, metrics, policy](const HttpRequest& request) -> Result<HttpResponse> {
                    return Counted(*metrics, ApiOp::kExec, [&]() -> Result<HttpResponse> {
                      FR_ASSIGN_OR_RETURN(Json body, request.ParseJsonBody());
                      FR_ASSIGN_OR_RETURN(ExecCall call, AdmitExec(*policy, JsonView(body, "body")));
                      const auto start = Clock::now();
                      FR_ASSIGN_OR_RETURN(ExecResult result, m->Exec(request.Param("id"), BufferedRequest(call)));
                      metrics->RecordExec(std::chrono::duration<double>(Clock::now() - start).count());
                      return JsonReply(ExecResultToJson(result));
                    }());
                  }, kScopeExec);

  http_.HandleStream(
      HttpMethod::kPost, "/v1/sandboxes/:id/exec/stream",
      [m, metrics, policy](const HttpRequest& request) -> Result<StreamResponse> {
        return Counted(*metrics, ApiOp::kExec, [&]() -> Result<StreamResponse> {
          FR_ASSIGN_OR_RETURN(Json body, request.ParseJsonBody());
          FR_ASSIGN_OR_RETURN(ExecCall call, AdmitExec(*policy, JsonView(body, "body")));
          const std::string id = request.Param("id");
          // Unknown and frozen sandboxes get a proper error status before
          // the 200 of the stream goes out.
          FR_ASSIGN_OR_RETURN(SandboxInfo info, m->Info(id));
          FR_RETURN_IF_ERROR(CheckVerb(info.state, Verb::kExec, id));
          StreamResponse reply;
          reply.content_type = "application/x-ndjson";
          reply.produce = [m, metrics, id, call](ChunkWriter& writer) -> Status {
            const auto start = Clock::now();
            Result<ExecResult> result =
                StreamExec(*m, id, call, [&](OutputStream stream, std::string_view data) {
                  const Json line = {{"stream", stream == OutputStream::kStdout ? "stdout" : "stderr"},
                                     {"data", std::string(data)}};
                  return writer.Write(DumpJson(line) + "\n");
                });
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
                   [m, metrics](const HttpRequest& request) -> Result<Json> {
                     const std::string& id = request.Param("id");
                     return Counted(*metrics, ApiOp::kSignal, [&]() -> Result<Json> {
                       FR_ASSIGN_OR_RETURN(int signal, SignalFromJson(request.Body()));
                       FR_RETURN_IF_ERROR(m->Signal(id, signal));
                       return Json{{"id", id}, {"signal", signal}};
                     }());
                   }, 200, kScopeExec);

  http_.HandleRaw(HttpMethod::kPut, "/v1/sandboxes/:id/files",
                  [m, metrics](const HttpRequest& request) -> Result<HttpResponse> {
                    return Counted(*metrics, ApiOp::kFiles, [&]() -> Result<HttpResponse> {
                      FR_ASSIGN_OR_RETURN(std::string path, RequiredPath(request));
                      FR_ASSIGN_OR_RETURN(mode_t mode, ModeParam(request));
                      FR_RETURN_IF_ERROR(m->PutFile(request.Param("id"), path, request.body, mode));
                      return JsonReply(Json{{"path", path}, {"bytes", request.body.size()}});
                    }());
                  }, kScopeFiles);

  http_.HandleRaw(HttpMethod::kGet, "/v1/sandboxes/:id/files",
                  [m, metrics](const HttpRequest& request) -> Result<HttpResponse> {
                    return Counted(*metrics, ApiOp::kFiles, [&]() -> Result<HttpResponse> {
                      FR_ASSIGN_OR_RETURN(std::string path, RequiredPath(request));
                      FR_ASSIGN_OR_RETURN(std::string data, m->GetFile(request.Param("id"), path));
                      HttpResponse reply;
                      reply.body = std::move(data);
                      return reply;
                    }());
                  }, kScopeFiles);

  http_.HandleJson(HttpMethod::kPost, "/v1/sandboxes/:id/freeze",
                   [m, metrics](const HttpRequest& request) -> Result<Json> {
                     const std::string& id = request.Param("id");
                     return Counted(*metrics, ApiOp::kFreeze, [&]() -> Result<Json> {
                       FR_RETURN_IF_ERROR(m->Freeze(id));
                       return Json{{"id", id}, {"state", "frozen"}};
                     }());
                   }, 200, kScopeExec);

  http_.HandleJson(HttpMethod::kPost, "/v1/sandboxes/:id/thaw",
                   [m, metrics](const HttpRequest& request) -> Result<Json> {
                     const std::string& id = request.Param("id");
                     return Counted(*metrics, ApiOp::kThaw, [&]() -> Result<Json> {
                       FR_RETURN_IF_ERROR(m->Thaw(id));
                       return Json{{"id", id}, {"state", "running"}};
                     }());
                   }, 200, kScopeExec);

  http_.HandleJson(HttpMethod::kDelete, "/v1/sandboxes/:id",
                   [m, metrics](const HttpRequest& request) -> Result<Json> {
                     const std::string& id = request.Param("id");
                     return Counted(*metrics, ApiOp::kDestroy, [&]() -> Result<Json> {
                       FR_RETURN_IF_ERROR(m->Destroy(id));
                       metrics->RecordDestroy();
                       return Json{{"id", id}, {"destroyed", true}};
                     }());
                   }, 200, kScopeExec);

  http_.HandleJson(HttpMethod::kGet, "/v1/sandboxes/:id/events",
                   [m, metrics](const HttpRequest& request) -> Result<Json> {
                     return Counted(*metrics, ApiOp::kEvents, [&]() -> Result<Json> {
                       FR_ASSIGN_OR_RETURN(uint64_t cursor, NumberParam(request, "cursor"));
                       FR_ASSIGN_OR_RETURN(uint64_t wait_ms, NumberParam(request, "wait_ms"));
                       wait_ms = std::min(wait_ms, kMaxEventWaitMs);
                       const std::string& id = request.Param("id");
                       Result<EventPage> page =
                           wait_ms > 0 ? m->WaitEvents(id, cursor, std::chrono::milliseconds(wait_ms))
                                       : m->EventsSince(id, cursor);
                       FR_RETURN_IF_ERROR(page.status());
                       return EventPageToJson(*page);
                     }());
                   }, 200, kScopeExec);

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

}  // namespace flashroll::sandbox::api
