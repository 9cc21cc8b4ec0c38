// The manager's side of one exec through a sandbox's init (see
// init_protocol.h): send the command and its stdio, then wait for it while
// collecting output, enforcing the timeout and watching for cancellation.
//
// Thread safety: one RunInInit per control socket at a time. SignalExec may
// be called from any thread meanwhile: it only sends, and a SEQPACKET
// message is written whole, never interleaved with another.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "sandbox/sandbox.h"

namespace flashroll::sandbox {

// Runs `request` in the sandbox whose init listens on `control_fd`. The
// result's oom_killed is left to the caller (it knows the cgroup). While
// the command may be running, `*running` holds exec_id: it is set only once
// the command is on the socket (so a SignalExec for it is queued behind the
// command, never before it) and reset to 0 before returning. Returns
// kInvalidArgument for an empty argv or an oversized command line,
// kUnavailable when the init is gone, kDeadlineExceeded when a killed
// command does not exit within 2 s (e.g. the sandbox is frozen).
Result<ExecResult> RunInInit(int control_fd, uint32_t exec_id, const ExecRequest& request,
                             const std::vector<std::string>& default_env, std::atomic<uint32_t>* running);

// Asks the init to send `sig` to the process group of exec `exec_id`; the
// init ignores it when that exec is not running (any more). Does not block:
// kUnavailable when the init is gone or is not reading its socket (frozen).
Status SignalExec(int control_fd, uint32_t exec_id, int sig);

}  // namespace flashroll::sandbox
