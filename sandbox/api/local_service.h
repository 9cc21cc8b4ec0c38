// LocalSandboxService: SandboxService over a Manager in this process (the
// in-process mode: no daemon, no HTTP).
//
// Thread safety: all methods may be called concurrently (Manager's rules).
#pragma once

#include <memory>

#include "sandbox/api/service.h"
#include "sandbox/sandbox.h"

namespace flashroll::sandbox::api {

class LocalSandboxService final : public SandboxService {
 public:
  // Opens a Manager owned by the service. Errors: Manager::Open's.
  static Result<std::unique_ptr<LocalSandboxService>> Open(const Manager::Options& options = {});
  // Uses `manager`, which must outlive the service.
  explicit LocalSandboxService(Manager* manager) : manager_(manager) {}

  Result<std::string> Create(const SandboxSpec& spec, const std::string& client_key = "") override;
  Result<ExecResult> Exec(const std::string& id, const ExecCall& call) override;
  Result<ExecResult> ExecStreaming(const std::string& id, const ExecCall& call,
                                   const OutputCallback& on_output) override;
  Status Signal(const std::string& id, int signal) override;
  Status PutFile(const std::string& id, const std::string& path, std::string_view data,
                 mode_t mode = 0644) override;
  Result<std::string> GetFile(const std::string& id, const std::string& path) override;
  Status Freeze(const std::string& id) override;
  Status Thaw(const std::string& id) override;
  Status Destroy(const std::string& id) override;
  Result<EventPage> Events(const std::string& id, uint64_t cursor,
                           std::chrono::milliseconds wait = std::chrono::milliseconds(0)) override;

  Manager& manager() { return *manager_; }

 private:
  explicit LocalSandboxService(std::unique_ptr<Manager> owned)
      : owned_(std::move(owned)), manager_(owned_.get()) {}

  std::unique_ptr<Manager> owned_;
  Manager* manager_;
};

}  // namespace flashroll::sandbox::api
