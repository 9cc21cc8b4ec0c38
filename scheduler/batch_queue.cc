#include "scheduler/batch_queue.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <ctime>
#include <utility>

namespace flashroll {
namespace {

using SystemTime = std::chrono::system_clock::time_point;

constexpr size_t kLeaseIdBytes = 16;

// 128 random bits: a lease id is the only thing standing between one
// trainer and acknowledging another's batch, so it must not be guessable.
Result<std::string> NewLeaseId() {
  unsigned char bytes[kLeaseIdBytes];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t n = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "getrandom for a lease id");
    }
    got += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id;
  id.reserve(2 * sizeof(bytes));
  for (unsigned char b : bytes) {
    id += kHex[b >> 4];
    id += kHex[b & 0xf];
  }
  return id;
}

// "2024-05-01T12:34:56.789Z".
std::string FormatUtcMillis(SystemTime t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch());
  const auto floor_s = std::chrono::floor<std::chrono::seconds>(ms);
  const std::time_t seconds = static_cast<std::time_t>(floor_s.count());
  std::tm tm{};
  ::gmtime_r(&seconds, &tm);
  char text[96];  // room for any int the compiler cannot rule out
  std::snprintf(text, sizeof(text), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>((ms - floor_s).count()));
  return text;
}

Status CheckGroup(const TrainingGroup& group) {
  const std::string where = "group " + std::to_string(group.group_id);
  if (group.samples.empty()) return Status::InvalidArgument(where + ": no samples");
  for (const TrainingSample& s : group.samples) {
    const size_t n = s.tokens.size();
    auto mismatch = [&](const char* field, size_t size) {
      return Status::InvalidArgument(where + ", sample " + std::to_string(s.sample_id) + ": " +
                                     field + " has " + std::to_string(size) +
                                     " entries for " + std::to_string(n) + " tokens");
    };
    if (s.logprobs.size() != n) return mismatch("logprobs", s.logprobs.size());
    if (s.versions.size() != n) return mismatch("versions", s.versions.size());
    if (s.loss_mask.size() != n) return mismatch("loss_mask", s.loss_mask.size());
  }
  return Status::Ok();
}

Status LeaseNotFound(const std::string& id) {
  return Status::NotFound("lease \"" + id + "\" not found: never issued, or finished too long ago to remember");
}

}  // namespace

BatchQueue::BatchQueue(BatchQueueOptions options) : options_(std::move(options)) {}

SystemTime BatchQueue::Now() const {
  return options_.clock ? options_.clock() : std::chrono::system_clock::now();
}

Status BatchQueue::Add(TrainingGroup group) {
  FR_RETURN_IF_ERROR(CheckGroup(group));
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) {
    return Status::FailedPrecondition("batch queue closed: group " +
                                      std::to_string(group.group_id) + " was not queued");
  }
  queued_.emplace(next_seq_++, std::move(group));
  changed_.notify_all();
  return Status::Ok();
}

Result<BatchLease> BatchQueue::Lease(size_t min_groups, size_t max_groups,
                                     std::chrono::milliseconds timeout) {
  if (min_groups < 1 || min_groups > max_groups) {
    return Status::InvalidArgument("lease: min_groups " + std::to_string(min_groups) +
                                   " must be between 1 and max_groups " +
                                   std::to_string(max_groups));
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    const SystemTime now = Now();
    ReclaimExpiredLocked(now);
    if (closed_ || queued_.size() >= min_groups) break;
    const auto steady_now = std::chrono::steady_clock::now();
    if (steady_now >= deadline) return BatchLease{};
    // Groups can come back from an expiring lease as well as from Add, so
    // sleep no longer than until the earliest expiry.
    auto wake = deadline;
    for (const auto& [id, lease] : live_) {
      const auto until_expiry =
          std::chrono::duration_cast<std::chrono::steady_clock::duration>(lease.expires_at - now);
      wake = std::min(wake, steady_now + until_expiry);
    }
    changed_.wait_until(lock, wake);
  }
  if (queued_.empty()) {
    return Status::FailedPrecondition("batch queue closed: every group has been handed out");
  }
  FR_ASSIGN_OR_RETURN(std::string id, NewLeaseId());
  LiveLease& lease = live_[id];
  lease.expires_at = Now() + options_.lease_duration;
  BatchLease out;
  out.id = id;
  out.expires_at = lease.expires_at;
  while (!queued_.empty() && out.groups.size() < max_groups) {
    auto node = queued_.extract(queued_.begin());
    out.groups.push_back(node.mapped());
    lease.groups.insert(std::move(node));
  }
  leased_groups_ += static_cast<int64_t>(out.groups.size());
  return out;
}

Status BatchQueue::Ack(const std::string& lease_id, std::optional<int64_t> into_version) {
  std::lock_guard<std::mutex> lock(mu_);
  const SystemTime now = Now();
  ReclaimExpiredLocked(now);
  if (auto it = live_.find(lease_id); it != live_.end()) {
    const auto n = static_cast<int64_t>(it->second.groups.size());
    consumed_ += n;
    leased_groups_ -= n;
    if (into_version) {
      for (auto& [seq, group] : it->second.groups) undurable_[seq] = {*into_version, std::move(group)};
    }
    live_.erase(it);
    RememberLocked(lease_id, FinishedLease{Ended::kAcked, now});
    return Status::Ok();
  }
  auto it = finished_.find(lease_id);
  if (it == finished_.end()) return LeaseNotFound(lease_id);
  if (it->second.how == Ended::kAcked) return Status::Ok();
  return EndedError(lease_id, it->second);
}

bool BatchQueue::MayBeAcked(const std::string& lease_id) {
  std::lock_guard<std::mutex> lock(mu_);
  ReclaimExpiredLocked(Now());
  if (live_.count(lease_id)) return true;
  auto it = finished_.find(lease_id);
  return it != finished_.end() && it->second.how == Ended::kAcked;
}

void BatchQueue::Durable(int64_t version) {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(undurable_, [&](const auto& entry) { return entry.second.into_version <= version; });
}

std::vector<int64_t> BatchQueue::ReturnUndurable(int64_t durable_version) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int64_t> returned;
  for (auto it = undurable_.begin(); it != undurable_.end();) {
    if (it->second.into_version <= durable_version) {
      ++it;
      continue;
    }
    returned.push_back(it->second.group.group_id);
    queued_.emplace(it->first, std::move(it->second.group));
    --consumed_;
    it = undurable_.erase(it);
  }
  if (!returned.empty()) changed_.notify_all();
  return returned;
}

int64_t BatchQueue::ReleaseAll() {
  std::lock_guard<std::mutex> lock(mu_);
  const SystemTime now = Now();
  ReclaimExpiredLocked(now);
  const auto released = static_cast<int64_t>(live_.size());
  for (auto& [id, lease] : live_) {
    RequeueLocked(lease);
    RememberLocked(id, FinishedLease{Ended::kReleased, now});
  }
  live_.clear();
  if (released > 0) changed_.notify_all();
  return released;
}

Result<std::chrono::system_clock::time_point> BatchQueue::Renew(const std::string& lease_id) {
  std::lock_guard<std::mutex> lock(mu_);
  const SystemTime now = Now();
  ReclaimExpiredLocked(now);
  if (auto it = live_.find(lease_id); it != live_.end()) {
    it->second.expires_at = now + options_.lease_duration;
    return it->second.expires_at;
  }
  auto it = finished_.find(lease_id);
  if (it == finished_.end()) return LeaseNotFound(lease_id);
  if (it->second.how == Ended::kAcked) {
    return Status::FailedPrecondition("lease " + lease_id + " was acknowledged at " + FormatUtcMillis(it->second.at) +
                                      "; there is nothing left to renew");
  }
  return EndedError(lease_id, it->second);
}

Status BatchQueue::Release(const std::string& lease_id) {
  std::lock_guard<std::mutex> lock(mu_);
  const SystemTime now = Now();
  ReclaimExpiredLocked(now);
  if (auto it = live_.find(lease_id); it != live_.end()) {
    RequeueLocked(it->second);
    live_.erase(it);
    RememberLocked(lease_id, FinishedLease{Ended::kReleased, now});
    changed_.notify_all();
    return Status::Ok();
  }
  auto it = finished_.find(lease_id);
  if (it == finished_.end()) return LeaseNotFound(lease_id);
  if (it->second.how == Ended::kAcked) {
    return Status::FailedPrecondition("lease " + lease_id + " was acknowledged at " + FormatUtcMillis(it->second.at) +
                                      "; its groups are consumed");
  }
  return Status::Ok();
}

Status BatchQueue::EndedError(const std::string& id, const FinishedLease& finished) {
  return Status::FailedPrecondition("lease " + id + (finished.how == Ended::kReleased ? " was released at " : " expired at ") +
                                    FormatUtcMillis(finished.at) + "; its groups were handed out again");
}

void BatchQueue::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  changed_.notify_all();
}

BatchQueueStats BatchQueue::Stats() {
  std::lock_guard<std::mutex> lock(mu_);
  ReclaimExpiredLocked(Now());
  BatchQueueStats stats;
  stats.queued = static_cast<int64_t>(queued_.size());
  stats.leased = leased_groups_;
  stats.live_leases = static_cast<int64_t>(live_.size());
  stats.consumed = consumed_;
  stats.expired_leases = expired_leases_;
  stats.undurable = static_cast<int64_t>(undurable_.size());
  stats.closed = closed_;
  return stats;
}

void BatchQueue::ReclaimExpiredLocked(SystemTime now) {
  bool requeued = false;
  for (auto it = live_.begin(); it != live_.end();) {
    if (it->second.expires_at > now) {
      ++it;
      continue;
    }
    RequeueLocked(it->second);
    ++expired_leases_;
    RememberLocked(it->first, FinishedLease{Ended::kExpired, it->second.expires_at});
    it = live_.erase(it);
    requeued = true;
  }
  if (requeued) changed_.notify_all();
}

void BatchQueue::RequeueLocked(LiveLease& lease) {
  leased_groups_ -= static_cast<int64_t>(lease.groups.size());
  queued_.merge(lease.groups);
}

void BatchQueue::RememberLocked(const std::string& id, FinishedLease finished) {
  finished_[id] = finished;
  finished_order_.push_back(id);
  while (finished_order_.size() > options_.lease_history) {
    finished_.erase(finished_order_.front());
    finished_order_.pop_front();
  }
}

}  // namespace flashroll
