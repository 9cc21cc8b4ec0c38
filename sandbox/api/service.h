// SandboxService: the sandbox lifecycle as the rest of the project calls it,
// one interface over two transports: HttpSandboxClient (client.h) talks to a
// `flashroll sandboxd` node agent; LocalSandboxService (local_service.h)
// calls a Manager in this process, so a single machine needs no daemon.
// Both report the same Status codes for the same failures (kNotFound for an
// unknown sandbox, kInvalidArgument for a bad spec or request, ...).
//
// Thread safety: implementations are safe to call from any number of
// threads at once.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include "common/json.h"
#include "common/status.h"
#include "sandbox/api/wire.h"
#include "sandbox/events.h"
#include "sandbox/sandbox.h"
#include "sandbox/spec.h"

namespace flashroll::sandbox::api {

enum class OutputStream { kStdout = 1, kStderr = 2 };

// Receives output of a streamed exec, in order per stream.
using OutputCallback = std::function<void(OutputStream stream, std::string_view data)>;

class SandboxService {
 public:
  virtual ~SandboxService() = default;

  // Creates and starts a sandbox; returns its id. A repeated call with the
  // same non-empty client_key returns the first sandbox's id while it
  // exists. kInvalidArgument for a bad spec.
  virtual Result<std::string> Create(const SandboxSpec& spec, const std::string& client_key = "") = 0;

  // Runs a command and returns its exit code and buffered output. A
  // timeout is a result with timed_out set (exit_code 137), not an error.
  // kNotFound for an unknown sandbox, kFailedPrecondition when frozen.
  virtual Result<ExecResult> Exec(const std::string& id, const ExecCall& call) = 0;

  // Like Exec, but output goes to `on_output` instead of the result's
  // stdout/stderr, which stay empty.
  virtual Result<ExecResult> ExecStreaming(const std::string& id, const ExecCall& call,
                                           const OutputCallback& on_output) = 0;

  // Sends `signal` (1..64) to the process group of the exec running in the
  // sandbox, without waiting for it; that exec's result shows the effect.
  // kFailedPrecondition when no exec is running (or frozen),
  // kInvalidArgument for a bad number, kNotFound for an unknown sandbox.
  virtual Status Signal(const std::string& id, int signal) = 0;

  // Writes/reads a regular file inside the sandbox as the sandbox's user
  // (Manager::PutFile, GetFile; resolved in its root, symlinks cannot lead
  // out). kNotFound for an unknown sandbox or missing file,
  // kInvalidArgument for a FIFO, device, socket, directory or symlink.
  virtual Status PutFile(const std::string& id, const std::string& path, std::string_view data,
                         mode_t mode = 0644) = 0;
  virtual Result<std::string> GetFile(const std::string& id, const std::string& path) = 0;

  virtual Status Freeze(const std::string& id) = 0;
  virtual Status Thaw(const std::string& id) = 0;

  // Kills everything and removes the sandbox; kNotFound when unknown.
  virtual Status Destroy(const std::string& id) = 0;

  // The sandbox's repercussion events (sandbox/events.h) after `cursor`
  // (0: from the first); with a non-zero `wait`, blocks up to that long for
  // a newer one. Readable for a while after Destroy. kNotFound for an id
  // never seen.
  virtual Result<EventPage> Events(const std::string& id, uint64_t cursor,
                                   std::chrono::milliseconds wait = std::chrono::milliseconds(0)) = 0;
};

}  // namespace flashroll::sandbox::api
