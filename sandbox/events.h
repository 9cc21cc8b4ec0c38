// Repercussion events: what happened to a sandbox, as a typed log per
// sandbox that clients read with a cursor.
//
// The manager emits an event when a sandbox is created or destroyed, when
// the kernel OOM-kills one of its processes, when its init (PID 1) exits on
// its own, when its root filesystem is damaged (an essential path such as
// /bin/sh, /usr/bin or /lib deleted or replaced in the writable layer), and
// when an exec or the sandbox's TTL times out, and when an attempt to tear
// it down failed (the log stays open until the teardown finishes). A crash becomes a failed
// trajectory through these events (see Manager::EventsSince).
//
// Each sandbox's events carry sequence numbers 1, 2, 3, ... A cursor is the
// last sequence number a reader has seen (0: none); EventsSince(id, cursor)
// returns the later ones and the cursor to pass next time. The log keeps
// the newest kMaxEventsPerSandbox events of each sandbox (older ones are
// dropped: a reader whose cursor is behind sees a gap in the sequence
// numbers), and the logs of the kMaxRetiredSandboxes most recently destroyed
// sandboxes, so that the final events stay readable after Destroy.
//
// Thread safety: EventLog is thread-safe; Wait blocks only the caller.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"

namespace flashroll::sandbox {

enum class EventKind {
  kCreated,
  kDestroyed,     // detail: why (destroy, ttl, manager shutdown)
  kOom,           // the kernel OOM-killed a process of the sandbox
  kInitExit,      // the sandbox's PID 1 exited without Destroy; the sandbox is dead
  kRootfsDamage,  // detail: the essential path that was deleted or replaced
  kTimeout,       // an exec ran past its timeout, or the TTL expired
  kTeardownFailed,  // detail: a teardown attempt's error; the reaper (reaper.h) retries it
};

// "created", "destroyed", "oom", "init_exit", "rootfs_damage", "timeout",
// "teardown_failed".
const char* EventKindName(EventKind kind);

struct SandboxEvent {
  std::string sandbox_id;
  uint64_t seq = 0;  // 1, 2, ... per sandbox
  EventKind kind = EventKind::kCreated;
  std::string detail;
  std::chrono::system_clock::time_point time;
};

struct EventPage {
  std::vector<SandboxEvent> events;  // oldest first
  uint64_t next_cursor = 0;          // pass to the next call
  bool closed = false;               // the sandbox is destroyed: no more events will come
};

class EventLog {
 public:
  static constexpr size_t kMaxEventsPerSandbox = 1024;
  static constexpr size_t kMaxRetiredSandboxes = 4096;

  EventLog() = default;
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  // Appends an event to `id`'s log (creating the log on first use) and
  // wakes waiters. Returns its sequence number. Events for a closed log are
  // dropped (returns 0).
  uint64_t Emit(const std::string& id, EventKind kind, std::string detail);

  // Marks `id`'s log closed (after its kDestroyed event): readers see
  // closed = true; the log is kept among the retired ones.
  void Close(const std::string& id);

  // Events of `id` with seq > cursor. Returns kNotFound when the log of
  // `id` does not exist (never created, or retired long ago).
  Result<EventPage> EventsSince(const std::string& id, uint64_t cursor) const;

  // Like EventsSince, but when there is nothing newer and the log is open,
  // waits up to `timeout` for an event. Returns an empty page on timeout.
  Result<EventPage> WaitEventsSince(const std::string& id, uint64_t cursor, std::chrono::milliseconds timeout);

 private:
  struct Log {
    std::deque<SandboxEvent> events;
    uint64_t last_seq = 0;
    bool closed = false;
  };

  EventPage PageLocked(const Log& log, uint64_t cursor) const;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Log> logs_;   // guarded by mu_
  std::deque<std::string> retired_;  // closed logs, oldest first; guarded by mu_
};

}  // namespace flashroll::sandbox
