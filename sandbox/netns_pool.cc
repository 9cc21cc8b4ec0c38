#include "sandbox/netns_pool.h"

#include <fcntl.h>
#include <sched.h>

#include "common/log.h"
#include "sandbox/net.h"

namespace flashroll::sandbox {

NetnsPool::NetnsPool(size_t capacity) : capacity_(capacity), thread_([this] { FillLoop(); }) {}

NetnsPool::~NetnsPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

UniqueFd NetnsPool::Take() {
  std::lock_guard<std::mutex> lock(mu_);
  if (ready_.empty()) return UniqueFd();
  UniqueFd fd = std::move(ready_.front());
  ready_.pop_front();
  cv_.notify_all();
  return fd;
}

// Runs on its own thread: unshare(CLONE_NEWNET) moves only this thread into
// the new namespace, and setns brings it back, so no other thread's sockets
// ever land in a pooled namespace.
void NetnsPool::FillLoop() {
  UniqueFd home(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  auto give_up = [](const char* call) {
    log::Warn("sandbox: network namespace pool stopped; sandboxes clone their own",
              {{"call", call}, {"errno", static_cast<int64_t>(errno)}});
  };
  if (!home.valid()) return give_up("open /proc/thread-self/ns/net");
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || ready_.size() < capacity_; });
      if (stopping_) return;
    }
    if (::unshare(CLONE_NEWNET) != 0) return give_up("unshare(CLONE_NEWNET)");
    UniqueFd made(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
    const bool loopback_up = made.valid() && NetChild().ok();
    if (::setns(home.get(), CLONE_NEWNET) != 0) {
      // This thread is stranded in the new namespace: keep it out of use.
      return give_up("setns(home)");
    }
    if (!loopback_up) return give_up("bring up lo in a new namespace");
    std::lock_guard<std::mutex> lock(mu_);
    ready_.push_back(std::move(made));
  }
}

}  // namespace flashroll::sandbox
