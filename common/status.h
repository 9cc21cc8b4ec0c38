// Status and Result<T>: the one error type used across Flashroll's modules.
//
// A Status is either OK or a code plus a message. Success costs nothing (an
// empty string, no allocation). Context is added on the way up with Wrap(),
// so a message that reaches a user or an HTTP client reads from the outside
// in: "load models/default: model.safetensors: tensor lm_head.weight: ...".
// No exceptions cross module boundaries; functions return Status or Result.
//
// Thread safety: a Status is a value; distinct objects may be used from
// distinct threads without synchronisation.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace flashroll {

enum class Code {
  kOk = 0,
  kInvalidArgument,    // bad input from a user, file or request
  kNotFound,
  kAlreadyExists,
  kPermissionDenied,
  kUnauthenticated,
  kResourceExhausted,  // a limit was hit: memory, quota, body size
  kFailedPrecondition, // the system is not in a state that allows this
  kDeadlineExceeded,
  kUnavailable,        // try again later
  kCorruption,         // stored data is damaged
  kIoError,            // a system call failed
  kUnimplemented,
  kInternal,           // a bug
};

// Short stable name of a code, e.g. "invalid_argument"; used in JSON errors.
const char* CodeName(Code code);
// The code named `name` (the inverse of CodeName); nullopt for an unknown name
// and for "ok", which never names an error.
std::optional<Code> CodeFromName(std::string_view name);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
  static Status AlreadyExists(std::string m) { return {Code::kAlreadyExists, std::move(m)}; }
  static Status PermissionDenied(std::string m) { return {Code::kPermissionDenied, std::move(m)}; }
  static Status Unauthenticated(std::string m) { return {Code::kUnauthenticated, std::move(m)}; }
  static Status ResourceExhausted(std::string m) { return {Code::kResourceExhausted, std::move(m)}; }
  static Status FailedPrecondition(std::string m) { return {Code::kFailedPrecondition, std::move(m)}; }
  static Status DeadlineExceeded(std::string m) { return {Code::kDeadlineExceeded, std::move(m)}; }
  static Status Unavailable(std::string m) { return {Code::kUnavailable, std::move(m)}; }
  static Status Corruption(std::string m) { return {Code::kCorruption, std::move(m)}; }
  static Status IoError(std::string m) { return {Code::kIoError, std::move(m)}; }
  static Status Unimplemented(std::string m) { return {Code::kUnimplemented, std::move(m)}; }
  static Status Internal(std::string m) { return {Code::kInternal, std::move(m)}; }

  // A failed system call: "what: strerror(err)". The code follows errno
  // (ENOENT -> kNotFound, EACCES/EPERM -> kPermissionDenied, ...).
  static Status FromErrno(int err, std::string_view what);

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

  // Returns this status with "context: " prepended to the message; OK stays OK.
  Status Wrap(std::string_view context) const;

  // "OK" or "<code name>: <message>".
  std::string ToString() const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    if (status_.ok()) status_ = Status::Internal("Result constructed from an OK status");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  // Precondition: ok().
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace flashroll

#define FR_CONCAT_INNER_(a, b) a##b
#define FR_CONCAT_(a, b) FR_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (a Status) is not OK.
#define FR_RETURN_IF_ERROR(expr)                       \
  do {                                                 \
    ::flashroll::Status fr_status_ = (expr);           \
    if (!fr_status_.ok()) return fr_status_;          \
  } while (0)

// Evaluates `expr` (a Result<T>); on error returns its Status, otherwise
// moves the value into `lhs` (which may be a declaration: `auto x`).
#define FR_ASSIGN_OR_RETURN(lhs, expr) \
  FR_ASSIGN_OR_RETURN_IMPL_(FR_CONCAT_(fr_result_, __LINE__), lhs, expr)
#define FR_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
