#include "sandbox/api/local_service.h"

#include "sandbox/api/stream_exec.h"

namespace flashroll::sandbox::api {

Result<std::unique_ptr<LocalSandboxService>> LocalSandboxService::Open(const Manager::Options& options) {
  FR_ASSIGN_OR_RETURN(std::unique_ptr<Manager> manager, Manager::Open(options));
  return std::unique_ptr<LocalSandboxService>(new LocalSandboxService(std::move(manager)));
}

Result<std::string> LocalSandboxService::Create(const SandboxSpec& spec, const std::string& client_key) {
  FR_RETURN_IF_ERROR(ValidateSpec(spec));
  return manager_->Create(spec, client_key);
}

Result<ExecResult> LocalSandboxService::Exec(const std::string& id, const ExecCall& call) {
  if (call.argv.empty()) return Status::InvalidArgument("exec: empty command");
  return manager_->Exec(id, BufferedRequest(call));
}

Result<ExecResult> LocalSandboxService::ExecStreaming(const std::string& id, const ExecCall& call,
                                                      const OutputCallback& on_output) {
  if (call.argv.empty()) return Status::InvalidArgument("exec: empty command");
  return StreamExec(*manager_, id, call, [&](OutputStream stream, std::string_view data) {
    on_output(stream, data);
    return true;
  });
}

Status LocalSandboxService::Signal(const std::string& id, int signal) { return manager_->Signal(id, signal); }

Status LocalSandboxService::PutFile(const std::string& id, const std::string& path, std::string_view data,
                                    mode_t mode) {
  return manager_->PutFile(id, path, data, mode);
}

Result<std::string> LocalSandboxService::GetFile(const std::string& id, const std::string& path) {
  return manager_->GetFile(id, path);
}

Status LocalSandboxService::Freeze(const std::string& id) { return manager_->Freeze(id); }
Status LocalSandboxService::Thaw(const std::string& id) { return manager_->Thaw(id); }
Status LocalSandboxService::Destroy(const std::string& id) { return manager_->Destroy(id); }

Result<EventPage> LocalSandboxService::Events(const std::string& id, uint64_t cursor,
                                              std::chrono::milliseconds wait) {
  if (wait.count() > 0) return manager_->WaitEvents(id, cursor, wait);
  return manager_->EventsSince(id, cursor);
}

}  // namespace flashroll::sandbox::api
