#include "sandbox/events.h"

namespace flashroll::sandbox {

const char* EventKindName(EventKind kind) {
  switch (kind) {
    case EventKind::kCreated: return "created";
    case EventKind::kDestroyed: return "destroyed";
    case EventKind::kOom: return "oom";
    case EventKind::kInitExit: return "init_exit";
    case EventKind::kRootfsDamage: return "rootfs_damage";
    case EventKind::kTimeout: return "timeout";
    case EventKind::kTeardownFailed: return "teardown_failed";
  }
  return "unknown";
}

uint64_t EventLog::Emit(const std::string& id, EventKind kind, std::string detail) {
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Log& log = logs_[id];
    if (log.closed) return 0;
    SandboxEvent event;
    event.sandbox_id = id;
    event.seq = ++log.last_seq;
    event.kind = kind;
    event.detail = std::move(detail);
    event.time = std::chrono::system_clock::now();
    log.events.push_back(std::move(event));
    if (log.events.size() > kMaxEventsPerSandbox) log.events.pop_front();
    seq = log.last_seq;
  }
  cv_.notify_all();
  return seq;
}

void EventLog::Close(const std::string& id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = logs_.find(id);
    if (it == logs_.end() || it->second.closed) return;
    it->second.closed = true;
    retired_.push_back(id);
    if (retired_.size() > kMaxRetiredSandboxes) {
      logs_.erase(retired_.front());
      retired_.pop_front();
    }
  }
  cv_.notify_all();
}

EventPage EventLog::PageLocked(const Log& log, uint64_t cursor) const {
  EventPage page;
  page.next_cursor = cursor;
  for (const SandboxEvent& event : log.events) {
    if (event.seq <= cursor) continue;
    page.events.push_back(event);
    page.next_cursor = event.seq;
  }
  page.closed = log.closed;
  return page;
}

Result<EventPage> EventLog::EventsSince(const std::string& id, uint64_t cursor) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = logs_.find(id);
  if (it == logs_.end()) return Status::NotFound("sandbox " + id + ": no events (unknown or long destroyed)");
  return PageLocked(it->second, cursor);
}

Result<EventPage> EventLog::WaitEventsSince(const std::string& id, uint64_t cursor,
                                            std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    auto it = logs_.find(id);
    if (it == logs_.end()) return Status::NotFound("sandbox " + id + ": no events (unknown or long destroyed)");
    if (it->second.last_seq > cursor || it->second.closed) return PageLocked(it->second, cursor);
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
      it = logs_.find(id);
      if (it == logs_.end()) return Status::NotFound("sandbox " + id + ": no events (unknown or long destroyed)");
      return PageLocked(it->second, cursor);
    }
  }
}

}  // namespace flashroll::sandbox
