#include "sandbox/reaper.h"

#include <algorithm>

namespace flashroll::sandbox {

Reaper::Reaper(Options options, std::function<void(const Report&)> report)
    : options_(options), report_(std::move(report)) {}

Reaper::~Reaper() {
  std::unique_lock<std::mutex> lock(mu_);
  draining_ = true;
  drain_deadline_ = Clock::now() + options_.drain_timeout;
  // Every pending teardown gets an attempt now; later ones (FailedLocked)
  // never wait past the deadline.
  for (Job& job : jobs_) job.due = std::min(job.due, Clock::now());
  cv_.notify_all();
  idle_cv_.wait_until(lock, drain_deadline_, [this] { return jobs_.empty(); });
  // Past the deadline: what is not running now gets no further attempt;
  // a running attempt that fails is abandoned by its worker.
  std::vector<Report> abandoned;
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (it->running) {
      ++it;
      continue;
    }
    abandoned.push_back(Report{it->id, Outcome::kAbandoned, it->attempts, it->last, std::chrono::milliseconds(0)});
    ++stats_.abandoned;
    it = jobs_.erase(it);
  }
  lock.unlock();
  for (const Report& report : abandoned) report_(report);
  lock.lock();
  idle_cv_.wait(lock, [this] { return jobs_.empty(); });
  stopping_ = true;
  cv_.notify_all();
  std::vector<std::thread> workers = std::move(workers_);
  lock.unlock();
  for (std::thread& worker : workers) worker.join();
}

void Reaper::Submit(const std::string& id, Teardown teardown, const Status& failed) {
  std::unique_lock<std::mutex> lock(mu_);
  Job& job = jobs_.emplace_back();
  job.id = id;
  job.teardown = std::move(teardown);
  job.due = Clock::now();
  if (failed.ok()) {
    MaybeSpawnLocked();
    cv_.notify_all();
    return;
  }
  job.attempts = 1;
  Report report = FailedLocked(std::prev(jobs_.end()), failed);
  lock.unlock();
  report_(report);
}

Reaper::Stats Reaper::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats stats = stats_;
  stats.pending = jobs_.size();
  return stats;
}

void Reaper::MaybeSpawnLocked() {
  const bool waiting = std::any_of(jobs_.begin(), jobs_.end(), [](const Job& job) { return !job.running; });
  if (!waiting || stopping_ || busy_ < workers_.size() || workers_.size() >= options_.max_workers) return;
  workers_.emplace_back([this] { WorkerLoop(); });
}

Reaper::Report Reaper::FailedLocked(std::list<Job>::iterator job, const Status& status) {
  ++stats_.failed_attempts;
  Report report{job->id, Outcome::kRetrying, job->attempts, status, std::chrono::milliseconds(0)};
  job->last = status;
  job->running = false;
  const auto now = Clock::now();
  if (draining_ && now >= drain_deadline_) {
    report.outcome = Outcome::kAbandoned;
    ++stats_.abandoned;
    jobs_.erase(job);
    idle_cv_.notify_all();
    return report;
  }
  job->backoff = job->backoff.count() == 0 ? options_.first_backoff : std::min(job->backoff * 2, options_.max_backoff);
  job->due = now + job->backoff;
  if (draining_) job->due = std::min(job->due, drain_deadline_);
  report.next_retry = std::chrono::duration_cast<std::chrono::milliseconds>(job->due - now);
  MaybeSpawnLocked();
  cv_.notify_all();
  return report;
}

void Reaper::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    const auto now = Clock::now();
    auto next = jobs_.end();
    auto earliest = Clock::time_point::max();
    for (auto it = jobs_.begin(); it != jobs_.end(); ++it) {
      if (it->running) continue;
      if (it->due <= now) {
        next = it;
        break;
      }
      earliest = std::min(earliest, it->due);
    }
    if (next == jobs_.end()) {
      if (earliest == Clock::time_point::max()) {
        cv_.wait(lock);
      } else {
        cv_.wait_until(lock, earliest);
      }
      continue;
    }
    next->running = true;
    ++busy_;
    MaybeSpawnLocked();  // another due job must not wait for this attempt
    lock.unlock();
    // The attempt runs without the lock: it may take long, and other
    // workers pick up other sandboxes meanwhile.
    const Status status = next->teardown();
    lock.lock();
    --busy_;
    ++next->attempts;
    Report report;
    if (status.ok()) {
      report = Report{next->id, Outcome::kFinished, next->attempts, status, std::chrono::milliseconds(0)};
      ++stats_.finished;
      jobs_.erase(next);
      idle_cv_.notify_all();
    } else {
      report = FailedLocked(next, status);
    }
    lock.unlock();
    report_(report);
    lock.lock();
  }
}

}  // namespace flashroll::sandbox
