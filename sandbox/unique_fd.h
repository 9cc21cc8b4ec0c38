// UniqueFd: sole owner of one file descriptor, closed on destruction.
//
// The sandbox code holds many descriptors (pidfds, cgroup directories,
// sockets, pipes); each lives in a UniqueFd so no error path leaks one.
//
// Thread safety: a UniqueFd is not synchronised; share it only read-only.
#pragma once

#include <unistd.h>

#include <utility>

namespace flashroll::sandbox {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives up ownership; returns the descriptor (or -1).
  int release() { return std::exchange(fd_, -1); }
  // Closes the current descriptor, if any, and owns `fd`.
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace flashroll::sandbox
