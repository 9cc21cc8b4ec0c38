// Runs an exec with its stdout and stderr on pipes and hands the output to
// a callback as it arrives: the streamed exec of the HTTP API and of the
// in-process service.
//
// Thread safety: reentrant; `on_output` runs on the calling thread.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "sandbox/api/service.h"
#include "sandbox/sandbox.h"

namespace flashroll::sandbox::api {

// Returns the exec's result (with empty stdout/stderr) or Manager::Exec's
// error. When `on_output` returns false (the reader went away) the command
// is cancelled and the result is marked cancelled.
Result<ExecResult> StreamExec(Manager& manager, const std::string& id, const ExecCall& call,
                              const std::function<bool(OutputStream, std::string_view)>& on_output);

// The ExecRequest for a buffered exec of `call`.
ExecRequest BufferedRequest(const ExecCall& call);

}  // namespace flashroll::sandbox::api
