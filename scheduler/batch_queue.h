// BatchQueue: the finished TrainingGroups waiting for the trainer, handed
// out under leases so that each group is consumed exactly once even when a
// trainer crashes or stalls between receiving a batch and acknowledging it.
//
// A group is queued (Add), then leased (Lease moves it into a lease with a
// random id and an expiry), then either consumed (Ack of that lease before
// it expires) or, when the lease expires unacknowledged, queued again in its
// original place, ahead of every group added after it. Only the first
// successful Ack of a lease consumes its groups; an Ack that comes after
// the lease expired fails, because its groups were (or will be) handed to
// another lease.
//
// An Ack may name the weight version whose checkpoint will hold the update
// that trained the groups (`into_version`): the groups are consumed at once
// (the scheduler's staleness gate moves), but the queue keeps them until
// Durable(V >= into_version) says such a checkpoint is published, so that
// ReturnUndurable can queue them again when the trainer died before that (its
// successor resumes from a checkpoint without their update).
//
// Two clocks: lease expiry is measured on the injectable `clock` (wall
// time, so expires_at can be shown to clients; a test clock expires leases
// without sleeping), while a long poll's `timeout` is real elapsed time
// (steady_clock), since it is how long a caller is actually blocked.
// Expired leases are reclaimed at the start of every call, and a blocked
// Lease also wakes at the earliest expiry it can see when it starts
// waiting; a test that moves its clock forward makes a blocked Lease see the
// reclaimed groups by calling any method (Stats(), say).
//
// Thread safety: all methods may be called from any number of threads.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "scheduler/training_batch.h"

namespace flashroll {

using LeaseClock = std::function<std::chrono::system_clock::time_point()>;

struct BatchQueueOptions {
  // How long a trainer has to Ack a lease before its groups are handed out
  // again. Long enough for the trainer to consume a batch.
  std::chrono::milliseconds lease_duration{std::chrono::minutes(10)};
  // Lease expiry is measured on this clock; empty means system_clock::now.
  LeaseClock clock;
  // How many finished (acknowledged or expired) lease ids are remembered, so
  // that a late Ack is told its lease expired rather than that it never
  // existed. Older ids are forgotten (their Ack answers kNotFound).
  size_t lease_history = 4096;
};

// Groups handed out together. An empty `id` (and no groups) means the long
// poll timed out.
struct BatchLease {
  std::string id;  // 32 hex digits from getrandom(2): not guessable
  std::vector<TrainingGroup> groups;  // FIFO order
  std::chrono::system_clock::time_point expires_at;  // on the queue's clock
};

// Counters for status pages.
struct BatchQueueStats {
  int64_t queued = 0;          // groups waiting for a lease now
  int64_t leased = 0;          // groups in live leases now
  int64_t live_leases = 0;     // leases not yet acknowledged or expired
  int64_t consumed = 0;        // groups acknowledged, in total
  int64_t expired_leases = 0;  // leases that expired unacknowledged, in total
  int64_t undurable = 0;       // groups acknowledged into a version not yet durable, now
  bool closed = false;
};

class BatchQueue {
 public:
  explicit BatchQueue(BatchQueueOptions options = {});
  BatchQueue(const BatchQueue&) = delete;
  BatchQueue& operator=(const BatchQueue&) = delete;

  // Queues a complete group at the back. Errors: kInvalidArgument for a
  // group without samples or a sample whose logprobs, versions or loss_mask
  // differ in length from its tokens (the message names the group and
  // sample); kFailedPrecondition after Close().
  Status Add(TrainingGroup group);

  // Blocks until at least `min_groups` groups are queued, then leases up to
  // `max_groups` of them, oldest first. Returns an empty BatchLease when
  // `timeout` passes first. After Close() it does not wait: it leases what
  // is queued (up to max_groups, even fewer than min_groups, so the last
  // partial batch can be drained) and fails with kFailedPrecondition once
  // nothing is queued. Errors: kInvalidArgument unless
  // 1 <= min_groups <= max_groups; kIoError if getrandom(2) fails.
  Result<BatchLease> Lease(size_t min_groups, size_t max_groups,
                           std::chrono::milliseconds timeout);

  // Consumes the groups of lease `lease_id` for good. OK for a live lease,
  // and again for a lease already acknowledged (a retried Ack whose reply
  // was lost consumes nothing twice). Errors: kFailedPrecondition for a
  // lease that expired ("lease X expired at <UTC time>; its groups were
  // handed out again"), kNotFound for an id never issued or long forgotten.
  // With `into_version`, the groups are held, consumed, until Durable or
  // ReturnUndurable (above); without, they are gone for good.
  Status Ack(const std::string& lease_id, std::optional<int64_t> into_version = std::nullopt);

  // Whether an Ack of `lease_id` can still answer OK: the lease is live, or
  // acknowledged and still remembered (a retry). False once it expired, was
  // released or is forgotten.
  bool MayBeAcked(const std::string& lease_id);

  // A checkpoint of `version` is durable: the groups acknowledged into a
  // version <= `version` are consumed for good.
  void Durable(int64_t version);

  // The groups acknowledged into a version above `durable_version` (no
  // durable checkpoint holds their update) go back to the queue, in their
  // original place, and count as consumed no more. Returns their group ids,
  // in queue order.
  std::vector<int64_t> ReturnUndurable(int64_t durable_version);

  // Releases every live lease (see Release), e.g. those of a trainer that
  // died. Returns how many there were.
  int64_t ReleaseAll();

  // Moves the expiry of live lease `lease_id` to lease_duration from now (a
  // trainer whose step outlasts the lease keeps it). Returns the new expiry.
  // Errors: kFailedPrecondition for a lease acknowledged, expired or
  // released (naming which), kNotFound as for Ack.
  Result<std::chrono::system_clock::time_point> Renew(const std::string& lease_id);

  // Gives the groups of live lease `lease_id` back now, in their original
  // place, as an expiry would (a trainer that will not train them, e.g. one
  // shutting down, need not make them wait out the lease). OK again for a
  // lease already released or expired (its groups are back either way);
  // an Ack of it then fails. Errors: kFailedPrecondition for a lease
  // acknowledged, kNotFound as for Ack.
  Status Release(const std::string& lease_id);

  // Stops Add and wakes every blocked Lease. Live leases can still be
  // acknowledged, and expired ones still return their groups to the queue.
  void Close();

  BatchQueueStats Stats();

 private:
  struct LiveLease {
    std::map<uint64_t, TrainingGroup> groups;  // keyed by Add order
    std::chrono::system_clock::time_point expires_at;
  };
  enum class Ended { kAcked, kExpired, kReleased };
  struct FinishedLease {
    Ended how = Ended::kExpired;
    std::chrono::system_clock::time_point at;
  };
  // The error for an Ack or Renew of a lease that ended without an ack.
  static Status EndedError(const std::string& id, const FinishedLease& finished);

  std::chrono::system_clock::time_point Now() const;
  // Moves the groups of every lease that has expired by `now` back into
  // the queue and wakes waiters if any did.
  void ReclaimExpiredLocked(std::chrono::system_clock::time_point now);
  // Puts a live lease's groups back in the queue.
  void RequeueLocked(LiveLease& lease);
  void RememberLocked(const std::string& id, FinishedLease finished);

  // Constant after construction.
  const BatchQueueOptions options_;

  std::mutex mu_;
  std::condition_variable changed_;  // a group was queued, or the queue closed
  // Keyed by Add order, so a group returned from an expired lease takes its
  // old place ahead of the groups added after it.
  std::map<uint64_t, TrainingGroup> queued_;      // guarded by mu_
  uint64_t next_seq_ = 0;                          // guarded by mu_
  std::map<std::string, LiveLease> live_;          // guarded by mu_
  struct UndurableGroup {
    int64_t into_version = 0;
    TrainingGroup group;
  };
  std::map<uint64_t, UndurableGroup> undurable_;   // by Add order; guarded by mu_
  std::map<std::string, FinishedLease> finished_;  // guarded by mu_
  std::deque<std::string> finished_order_;         // oldest first; guarded by mu_
  int64_t leased_groups_ = 0;                      // guarded by mu_
  int64_t consumed_ = 0;                           // guarded by mu_
  int64_t expired_leases_ = 0;                     // guarded by mu_
  bool closed_ = false;                            // guarded by mu_
};

}  // namespace flashroll
