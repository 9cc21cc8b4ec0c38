// The manager's side of one exec through a sandbox's init (see
// init_protocol.h): send the command and its stdio, then wait for it while
// collecting output, enforcing the timeout and watching for cancellation.
//
// Thread safety: one RunInInit per control socket at a time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "sandbox/sandbox.h"

namespace flashroll::sandbox {

// Runs `request` in the sandbox whose init listens on `control_fd`. The
// result's oom_killed is left to the caller (it knows the cgroup). Returns
// kInvalidArgument for an empty argv or an oversized command line,
// kUnavailable when the init is gone, kDeadlineExceeded when a killed
// command does not exit within 2 s (e.g. the sandbox is frozen).
Result<ExecResult> RunInInit(int control_fd, uint32_t exec_id, const ExecRequest& request,
                             const std::vector<std::string>& default_env);

}  // namespace flashroll::sandbox
