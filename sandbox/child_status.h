// ChildStatus: the result of a child-side isolation step.
//
// Child-side steps run between clone3() and execve() in a copy of a
// possibly multithreaded manager. There, malloc may deadlock (another
// thread may have held its lock at clone time), so child-side code makes
// raw system calls on data the parent prepared and reports failure as this
// plain struct of static strings. The launcher sends it to the parent over
// the handshake socket, where it becomes a Status.
//
// Thread safety: a value.
#pragma once

#include <cerrno>
#include <cstring>

#include "common/status.h"

namespace flashroll::sandbox {

struct ChildStatus {
  const char* step = nullptr;  // "mount", "caps", ...; nullptr when OK
  const char* call = nullptr;  // the failed system call, e.g. "pivot_root"
  const char* arg = nullptr;   // its main argument (a path), may be nullptr
  int err = 0;

  bool ok() const { return step == nullptr; }
  static ChildStatus Ok() { return {}; }
  // Captures errno; call right after the failed system call.
  static ChildStatus Errno(const char* step, const char* call, const char* arg) {
    return {step, call, arg, errno};
  }
};

// The wire form of a failed ChildStatus: fixed size, no pointers.
struct ChildStatusMessage {
  char step[32];
  char call[48];
  char arg[256];
  int err;
};

// Fills `out` from `status` without allocating; strings are truncated.
inline void EncodeChildStatus(const ChildStatus& status, ChildStatusMessage* out) {
  auto copy = [](char* dst, size_t size, const char* src) {
    size_t i = 0;
    for (; src != nullptr && src[i] != '\0' && i + 1 < size; ++i) dst[i] = src[i];
    dst[i] = '\0';
  };
  copy(out->step, sizeof(out->step), status.step);
  copy(out->call, sizeof(out->call), status.call);
  copy(out->arg, sizeof(out->arg), status.arg);
  out->err = status.err;
}

// "step: call arg: strerror" with the errno-derived code.
inline Status DecodeChildStatus(const ChildStatusMessage& message) {
  std::string what = std::string(message.step) + ": " + message.call;
  if (message.arg[0] != '\0') what += std::string(" ") + message.arg;
  return Status::FromErrno(message.err, what);
}

}  // namespace flashroll::sandbox
