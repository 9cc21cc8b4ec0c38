#include "common/status.h"

#include <cerrno>
#include <cstring>

namespace flashroll {

const char* CodeName(Code code) {
  switch (code) {
    case Code::kOk: return "ok";
    case Code::kInvalidArgument: return "invalid_argument";
    case Code::kNotFound: return "not_found";
    case Code::kAlreadyExists: return "already_exists";
    case Code::kPermissionDenied: return "permission_denied";
    case Code::kUnauthenticated: return "unauthenticated";
    case Code::kResourceExhausted: return "resource_exhausted";
    case Code::kFailedPrecondition: return "failed_precondition";
    case Code::kDeadlineExceeded: return "deadline_exceeded";
    case Code::kUnavailable: return "unavailable";
    case Code::kCorruption: return "corruption";
    case Code::kIoError: return "io_error";
    case Code::kUnimplemented: return "unimplemented";
    case Code::kInternal: return "internal";
  }
  return "unknown";
}

std::optional<Code> CodeFromName(std::string_view name) {
  for (int i = static_cast<int>(Code::kOk) + 1; i <= static_cast<int>(Code::kInternal); ++i) {
    if (name == CodeName(static_cast<Code>(i))) return static_cast<Code>(i);
  }
  return std::nullopt;
}

Status Status::FromErrno(int err, std::string_view what) {
  std::string message(what);
  message += ": ";
  message += std::strerror(err);
  Code code = Code::kIoError;
  switch (err) {
    case ENOENT: code = Code::kNotFound; break;
    case EEXIST: code = Code::kAlreadyExists; break;
    case EACCES:
    case EPERM: code = Code::kPermissionDenied; break;
    case EINVAL: code = Code::kInvalidArgument; break;
    case ENOMEM:
    case ENOSPC:
    case EDQUOT:
    case EMFILE:
    case ENFILE: code = Code::kResourceExhausted; break;
    case ETIMEDOUT: code = Code::kDeadlineExceeded; break;
    case EAGAIN:
    case EBUSY:
    case EADDRINUSE: code = Code::kUnavailable; break;
    case ENOSYS:
    case EOPNOTSUPP: code = Code::kUnimplemented; break;
    default: break;
  }
  return Status(code, std::move(message));
}

Status Status::Wrap(std::string_view context) const {
  if (ok()) return *this;
  std::string message(context);
  message += ": ";
  message += message_;
  return Status(code_, std::move(message));
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(CodeName(code_)) + ": " + message_;
}

}  // namespace flashroll
