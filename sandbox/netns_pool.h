// NetnsPool: fresh network namespaces made ahead of time.
//
// Creating a network namespace is the dearest part of clone3 (0.33 ms of
// 0.8 ms here); a sandbox that joins one made in the background starts that
// much sooner. Each namespace is new and handed out once, so a sandbox in it
// is as isolated as one cloned with CLONE_NEWNET: only a loopback interface,
// which the pool already brought up.
//
// Only for a manager with root: joining a namespace owned by the initial
// user namespace needs CAP_SYS_ADMIN there.
//
// Thread safety: Take may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <thread>

#include "sandbox/unique_fd.h"

namespace flashroll::sandbox {

class NetnsPool {
 public:
  // Starts the background thread that keeps `capacity` namespaces ready.
  explicit NetnsPool(size_t capacity);
  // Stops the thread; namespaces not handed out go with their descriptors.
  ~NetnsPool();

  NetnsPool(const NetnsPool&) = delete;
  NetnsPool& operator=(const NetnsPool&) = delete;

  // A descriptor of a fresh namespace (for setns), or an invalid one when
  // none is ready (the caller then clones with CLONE_NEWNET).
  UniqueFd Take();

 private:
  void FillLoop();

  const size_t capacity_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<UniqueFd> ready_;  // guarded by mu_
  bool stopping_ = false;       // guarded by mu_
  std::thread thread_;
};

}  // namespace flashroll::sandbox
