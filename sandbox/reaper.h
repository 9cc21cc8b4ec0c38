// Reaper: finishes sandbox teardowns that failed, or that must not block
// the thread that asked for them (TTL expiry, the crash watcher).
//
// A teardown is a function that removes what is left of one sandbox and
// returns OK once nothing is. It must be safe to call again after a
// failure (each step skips what is already gone) and must return within a
// bounded time (its waits have deadlines). The reaper runs it on a worker
// thread and, after a failure, again after a back-off that doubles from
// Options::first_backoff up to Options::max_backoff, until it succeeds.
// Every failed attempt and the final outcome go to the report callback
// (the manager logs them and emits events) and are counted in stats().
//
// Why several workers: a teardown can take long (a process in
// uninterruptible sleep keeps its pid namespace's init from being reaped
// until the attempt's deadline), and one slow sandbox must not delay the
// others. A worker is started whenever a teardown is due and every worker
// is busy, up to Options::max_workers; workers stay until destruction.
//
// Destruction drains: every pending teardown is attempted at once and
// retried until Options::drain_timeout has passed; what is still left then
// is reported as abandoned (a later manager's start-up reclaim finds it by its name,
// naming.h).
//
// Thread safety: Submit and stats may be called from any thread. The
// report callback runs on a worker thread (or the destructor's) with no
// reaper lock held; it must not call Submit.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace flashroll::sandbox {

class Reaper {
 public:
  using Teardown = std::function<Status()>;

  struct Options {
    std::chrono::milliseconds first_backoff{100};
    std::chrono::milliseconds max_backoff{30000};
    size_t max_workers = 8;
    std::chrono::milliseconds drain_timeout{10000};
  };

  enum class Outcome {
    kRetrying,   // this attempt failed; another follows after `next_retry`
    kFinished,   // this attempt succeeded: nothing of the sandbox is left
    kAbandoned,  // failed while the reaper was being destroyed past its drain timeout
  };

  struct Report {
    std::string id;
    Outcome outcome = Outcome::kRetrying;
    int attempt = 0;  // 1 for the first
    Status status;    // the attempt's result
    std::chrono::milliseconds next_retry{0};
  };

  struct Stats {
    size_t pending = 0;          // teardowns not finished yet
    uint64_t failed_attempts = 0;
    uint64_t finished = 0;       // teardowns the reaper completed
    uint64_t abandoned = 0;
  };

  Reaper(Options options, std::function<void(const Report&)> report);
  // Drains (see above), then joins the workers.
  ~Reaper();
  Reaper(const Reaper&) = delete;
  Reaper& operator=(const Reaper&) = delete;

  // Takes over the teardown of sandbox `id`. With `failed` OK the first
  // attempt runs at once on a worker; otherwise the caller already made
  // attempt 1, which failed with `failed` (it is reported as such), and
  // attempt 2 follows after the first back-off.
  void Submit(const std::string& id, Teardown teardown, const Status& failed = Status::Ok());

  Stats stats() const;

 private:
  using Clock = std::chrono::steady_clock;

  struct Job {
    std::string id;
    Teardown teardown;
    int attempts = 0;
    std::chrono::milliseconds backoff{0};
    Clock::time_point due;
    bool running = false;
    Status last;  // the last failed attempt's result
  };

  void WorkerLoop();
  // Starts a worker when every one is busy. Requires mu_.
  void MaybeSpawnLocked();
  // After a failed attempt: reschedules `job` or abandons it. Requires mu_.
  Report FailedLocked(std::list<Job>::iterator job, const Status& status);

  const Options options_;
  const std::function<void(const Report&)> report_;

  mutable std::mutex mu_;
  std::condition_variable cv_;       // work is due, or stopping
  std::condition_variable idle_cv_;  // a job finished (the destructor drains on it)
  std::list<Job> jobs_;              // guarded by mu_
  std::vector<std::thread> workers_; // guarded by mu_
  size_t busy_ = 0;                  // workers running an attempt; guarded by mu_
  bool draining_ = false;            // guarded by mu_
  bool stopping_ = false;            // workers exit; guarded by mu_
  Clock::time_point drain_deadline_; // guarded by mu_
  Stats stats_;                      // pending is jobs_.size(); guarded by mu_
};

}  // namespace flashroll::sandbox
