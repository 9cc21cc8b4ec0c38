#include "scheduler/batch_queue.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/scheduler/training_group_util.h"

namespace flashroll {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using scheduler_test::FakeClock;
using scheduler_test::GroupIds;
using scheduler_test::MakeGroup;
using Ids = std::vector<int64_t>;

constexpr milliseconds kNoWait{0};

BatchQueueOptions WithClock(FakeClock& clock, milliseconds lease = seconds(10)) {
  BatchQueueOptions options;
  options.lease_duration = lease;
  options.clock = clock.AsFunction();
  return options;
}

void AddGroups(BatchQueue& queue, std::initializer_list<int64_t> ids) {
  for (int64_t id : ids) ASSERT_TRUE(queue.Add(MakeGroup(id)).ok());
}

BatchLease MustLease(BatchQueue& queue, size_t min_groups, size_t max_groups,
                     milliseconds timeout = kNoWait) {
  Result<BatchLease> lease = queue.Lease(min_groups, max_groups, timeout);
  EXPECT_TRUE(lease.ok()) << lease.status().ToString();
  return lease.ok() ? *lease : BatchLease{};
}

TEST(BatchQueueTest, ExpiredLeaseIsHandedOutAgainAndConsumedExactlyOnce) {
  FakeClock clock;
  BatchQueue queue(WithClock(clock, seconds(10)));
  AddGroups(queue, {1, 2});

  BatchLease first = MustLease(queue, 2, 2);  // trainer A, which then stalls
  ASSERT_EQ(GroupIds(first.groups), (Ids{1, 2}));
  EXPECT_EQ(first.expires_at, clock.AsFunction()() + seconds(10));
  EXPECT_TRUE(MustLease(queue, 1, 1).id.empty()) << "leased groups are not queued";

  clock.Advance(seconds(11));
  BatchLease second = MustLease(queue, 1, 5);  // trainer B
  EXPECT_EQ(GroupIds(second.groups), (Ids{1, 2}));
  EXPECT_NE(second.id, first.id);

  Status late = queue.Ack(first.id);
  EXPECT_EQ(late.code(), Code::kFailedPrecondition);
  EXPECT_EQ(late.message(), "lease " + first.id +
                                " expired at 2023-11-14T22:13:30.000Z; its groups were handed "
                                "out again");
  EXPECT_TRUE(queue.Ack(second.id).ok());

  // B's ack consumed them: no third hand-out, however long we wait.
  clock.Advance(std::chrono::hours(1));
  EXPECT_TRUE(MustLease(queue, 1, 5).id.empty());
  BatchQueueStats stats = queue.Stats();
  EXPECT_EQ(stats.consumed, 2);
  EXPECT_EQ(stats.expired_leases, 1);
  EXPECT_EQ(stats.queued, 0);
  EXPECT_EQ(stats.leased, 0);
  EXPECT_EQ(stats.live_leases, 0);
}

TEST(BatchQueueTest, AckAtTheExpiryInstantIsLate) {
  FakeClock clock;
  BatchQueue queue(WithClock(clock, seconds(10)));
  AddGroups(queue, {1});
  BatchLease lease = MustLease(queue, 1, 1);
  clock.Advance(seconds(10));
  EXPECT_EQ(queue.Ack(lease.id).code(), Code::kFailedPrecondition);
}

TEST(BatchQueueTest, AckJustBeforeExpiryConsumes) {
  FakeClock clock;
  BatchQueue queue(WithClock(clock, seconds(10)));
  AddGroups(queue, {1});
  BatchLease lease = MustLease(queue, 1, 1);
  clock.Advance(milliseconds(9999));
  ASSERT_TRUE(queue.Ack(lease.id).ok());
  clock.Advance(seconds(60));
  EXPECT_TRUE(MustLease(queue, 1, 1).id.empty());
  EXPECT_EQ(queue.Stats().expired_leases, 0);
}

TEST(BatchQueueTest, RepeatedAckSucceedsWithoutConsumingTwice) {
  FakeClock clock;
  BatchQueue queue(WithClock(clock));
  AddGroups(queue, {1, 2});
  BatchLease lease = MustLease(queue, 2, 2);
  ASSERT_TRUE(queue.Ack(lease.id).ok());
  EXPECT_TRUE(queue.Ack(lease.id).ok()) << "a retried ack whose reply was lost";
  EXPECT_EQ(queue.Stats().consumed, 2);
}

// A trainer whose step outlasts the lease renews it and keeps its groups;
// without the renewal they would have gone to another lease at 10 s.
TEST(BatchQueueTest, ARenewedLeaseOutlastsItsFirstExpiry) {
  FakeClock clock;
  BatchQueue queue(WithClock(clock, seconds(10)));
  AddGroups(queue, {1, 2});
  BatchLease lease = MustLease(queue, 2, 2);
  clock.Advance(seconds(8));
  Result<std::chrono::system_clock::time_point> renewed = queue.Renew(lease.id);
  ASSERT_TRUE(renewed.ok()) << renewed.status().ToString();
  EXPECT_EQ(*renewed, clock.AsFunction()() + seconds(10));
  clock.Advance(seconds(8));  // 16 s after the lease: past its first expiry
  EXPECT_TRUE(MustLease(queue, 1, 5).id.empty()) << "the renewed lease still holds its groups";
  ASSERT_TRUE(queue.Ack(lease.id).ok());
  EXPECT_EQ(queue.Stats().consumed, 2);
  EXPECT_EQ(queue.Renew(lease.id).status().code(), Code::kFailedPrecondition) << "acknowledged";
  EXPECT_EQ(queue.Renew("0123456789abcdef0123456789abcdef").status().code(), Code::kNotFound);

  AddGroups(queue, {3});
  BatchLease late = MustLease(queue, 1, 1);
  clock.Advance(seconds(11));
  Status expired = queue.Renew(late.id).status();
  EXPECT_EQ(expired.code(), Code::kFailedPrecondition);
  EXPECT_NE(expired.message().find(" expired at "), std::string::npos) << expired.ToString();
}

// A released lease's groups are handed out again at once, in their place;
// its ack then fails, and releasing again changes nothing.
TEST(BatchQueueTest, AReleasedLeaseGivesItsGroupsBackAtOnce) {
  FakeClock clock;
  BatchQueue queue(WithClock(clock, seconds(10)));
  AddGroups(queue, {1, 2});
  BatchLease first = MustLease(queue, 1, 1);
  AddGroups(queue, {3});
  ASSERT_TRUE(queue.Release(first.id).ok());
  BatchLease second = MustLease(queue, 3, 3);
  EXPECT_EQ(GroupIds(second.groups), (Ids{1, 2, 3})) << "group 1 back ahead of the newer ones";
  EXPECT_TRUE(queue.Release(first.id).ok()) << "a retried release";
  Status ack = queue.Ack(first.id);
  EXPECT_EQ(ack.code(), Code::kFailedPrecondition);
  EXPECT_NE(ack.message().find("lease " + first.id + " was released at "), std::string::npos) << ack.ToString();
  ASSERT_TRUE(queue.Ack(second.id).ok());
  EXPECT_EQ(queue.Release(second.id).code(), Code::kFailedPrecondition) << "acknowledged groups stay consumed";
  EXPECT_EQ(queue.Stats().consumed, 3);
  EXPECT_EQ(queue.Stats().queued, 0);
}

TEST(BatchQueueTest, UnknownLeaseIsNotFound) {
  BatchQueue queue;
  Status status = queue.Ack("0123456789abcdef0123456789abcdef");
  EXPECT_EQ(status.code(), Code::kNotFound);
  EXPECT_NE(status.message().find("0123456789abcdef0123456789abcdef"), std::string::npos);
}

TEST(BatchQueueTest, FinishedLeasesAreForgottenBeyondTheHistory) {
  FakeClock clock;
  BatchQueueOptions options = WithClock(clock, seconds(10));
  options.lease_history = 1;
  BatchQueue queue(options);
  AddGroups(queue, {1, 2});
  BatchLease expired = MustLease(queue, 1, 1);
  clock.Advance(seconds(11));
  EXPECT_EQ(queue.Ack(expired.id).code(), Code::kFailedPrecondition);
  BatchLease acked = MustLease(queue, 1, 1);
  ASSERT_TRUE(queue.Ack(acked.id).ok());
  EXPECT_EQ(queue.Ack(expired.id).code(), Code::kNotFound);
  EXPECT_TRUE(queue.Ack(acked.id).ok());
}

TEST(BatchQueueTest, LeasesComeOutInAddOrder) {
  BatchQueue queue;
  AddGroups(queue, {1, 2, 3, 4, 5});
  EXPECT_EQ(GroupIds(MustLease(queue, 2, 2).groups), (Ids{1, 2}));
  EXPECT_EQ(GroupIds(MustLease(queue, 1, 10).groups), (Ids{3, 4, 5}));
}

TEST(BatchQueueTest, ExpiredGroupsGoBackAheadOfNewerOnes) {
  FakeClock clock;
  BatchQueue queue(WithClock(clock, seconds(10)));
  AddGroups(queue, {1, 2, 3});
  BatchLease a = MustLease(queue, 1, 1);  // group 1, expires at t+10
  clock.Advance(seconds(5));
  BatchLease b = MustLease(queue, 1, 1);  // group 2, expires at t+15
  AddGroups(queue, {4});

  clock.Advance(seconds(6));  // a has expired, b has not
  BatchQueueStats stats = queue.Stats();
  EXPECT_EQ(stats.queued, 3);
  EXPECT_EQ(stats.leased, 1);
  clock.Advance(seconds(5));  // now b too; group 2 goes between 1 and 3
  EXPECT_EQ(GroupIds(MustLease(queue, 1, 10).groups), (Ids{1, 2, 3, 4}));
}

TEST(BatchQueueTest, LeaseWaitsForMinGroups) {
  BatchQueue queue;
  AddGroups(queue, {1});
  EXPECT_TRUE(MustLease(queue, 2, 2, milliseconds(50)).id.empty());
  AddGroups(queue, {2, 3});
  EXPECT_EQ(GroupIds(MustLease(queue, 2, 2).groups), (Ids{1, 2}));
}

TEST(BatchQueueTest, LongPollTimesOutEmpty) {
  BatchQueue queue;
  const auto start = std::chrono::steady_clock::now();
  BatchLease lease = MustLease(queue, 1, 1, milliseconds(100));
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(100));
  EXPECT_TRUE(lease.id.empty());
  EXPECT_TRUE(lease.groups.empty());
}

TEST(BatchQueueTest, LongPollWakesOnAdd) {
  BatchQueue queue;
  const auto start = std::chrono::steady_clock::now();
  auto poll = std::async(std::launch::async, [&] { return MustLease(queue, 1, 1, seconds(30)); });
  std::this_thread::sleep_for(milliseconds(50));
  AddGroups(queue, {7});
  BatchLease lease = poll.get();
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(10));
  EXPECT_EQ(GroupIds(lease.groups), (Ids{7}));
}

TEST(BatchQueueTest, LongPollWakesWhenALeaseExpires) {
  BatchQueueOptions options;
  options.lease_duration = milliseconds(100);
  BatchQueue queue(options);
  AddGroups(queue, {1});
  BatchLease stalled = MustLease(queue, 1, 1);
  const auto start = std::chrono::steady_clock::now();
  BatchLease again = MustLease(queue, 1, 1, seconds(30));
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(10));
  EXPECT_EQ(GroupIds(again.groups), (Ids{1}));
}

TEST(BatchQueueTest, ReclaimingWakesABlockedLeaser) {
  FakeClock clock;
  BatchQueue queue(WithClock(clock, seconds(60)));
  AddGroups(queue, {1});
  BatchLease stalled = MustLease(queue, 1, 1);
  const auto start = std::chrono::steady_clock::now();
  auto poll = std::async(std::launch::async, [&] { return MustLease(queue, 1, 1, seconds(30)); });
  std::this_thread::sleep_for(milliseconds(50));
  clock.Advance(seconds(61));
  queue.Stats();  // any call reclaims the expired lease
  BatchLease again = poll.get();
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(10));
  EXPECT_EQ(GroupIds(again.groups), (Ids{1}));
}

TEST(BatchQueueTest, CloseWakesWaiters) {
  BatchQueue queue;
  const auto start = std::chrono::steady_clock::now();
  auto poll = std::async(std::launch::async, [&] { return queue.Lease(1, 1, seconds(30)); });
  std::this_thread::sleep_for(milliseconds(50));
  queue.Close();
  Result<BatchLease> lease = poll.get();
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(10));
  EXPECT_EQ(lease.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(lease.status().message().find("closed"), std::string::npos);
}

TEST(BatchQueueTest, ClosedQueueDrainsPartialBatchesAndRefusesAdds) {
  FakeClock clock;
  BatchQueue queue(WithClock(clock));
  AddGroups(queue, {1, 2});
  BatchLease live = MustLease(queue, 1, 1);
  queue.Close();
  EXPECT_EQ(queue.Add(MakeGroup(3)).code(), Code::kFailedPrecondition);
  EXPECT_TRUE(queue.Stats().closed);
  EXPECT_EQ(GroupIds(MustLease(queue, 4, 4, seconds(30)).groups), (Ids{2}));
  EXPECT_EQ(queue.Lease(1, 1, kNoWait).status().code(), Code::kFailedPrecondition);
  EXPECT_TRUE(queue.Ack(live.id).ok()) << "leases stay ackable after Close";
}

TEST(BatchQueueTest, ConcurrentLeasersGetDisjointGroups) {
  constexpr int kGroups = 400;
  constexpr int kTrainers = 6;
  BatchQueue queue;
  std::mutex mu;
  std::map<int64_t, int> handed_out;  // guarded by mu
  std::vector<std::thread> trainers;
  for (int t = 0; t < kTrainers; ++t) {
    trainers.emplace_back([&] {
      while (true) {
        Result<BatchLease> lease = queue.Lease(1, 3, milliseconds(200));
        if (!lease.ok()) return;  // closed and drained
        if (lease->id.empty()) continue;  // timed out; poll again
        {
          std::lock_guard<std::mutex> lock(mu);
          for (const TrainingGroup& g : lease->groups) ++handed_out[g.group_id];
        }
        EXPECT_TRUE(queue.Ack(lease->id).ok());
      }
    });
  }
  for (int i = 0; i < kGroups; ++i) ASSERT_TRUE(queue.Add(MakeGroup(i, 1)).ok());
  queue.Close();
  for (std::thread& t : trainers) t.join();
  ASSERT_EQ(handed_out.size(), static_cast<size_t>(kGroups));
  for (const auto& [id, times] : handed_out) EXPECT_EQ(times, 1) << "group " << id;
  EXPECT_EQ(queue.Stats().consumed, kGroups);
}

TEST(BatchQueueTest, AddRejectsGroupsThatCannotBeServed) {
  BatchQueue queue;
  TrainingGroup empty = MakeGroup(4, 0);
  Status status = queue.Add(empty);
  EXPECT_EQ(status.code(), Code::kInvalidArgument);
  EXPECT_EQ(status.message(), "group 4: no samples");

  for (const char* field : {"logprobs", "versions", "loss_mask"}) {
    TrainingGroup g = MakeGroup(5);
    TrainingSample& s = g.samples[1];
    if (std::string(field) == "logprobs") s.logprobs.pop_back();
    if (std::string(field) == "versions") s.versions.pop_back();
    if (std::string(field) == "loss_mask") s.loss_mask.pop_back();
    status = queue.Add(g);
    EXPECT_EQ(status.code(), Code::kInvalidArgument) << field;
    EXPECT_EQ(status.message(), "group 5, sample 501: " + std::string(field) +
                                    " has 3 entries for 4 tokens");
  }
  EXPECT_EQ(queue.Stats().queued, 0);
}

TEST(BatchQueueTest, LeaseRejectsBadBounds) {
  BatchQueue queue;
  AddGroups(queue, {1});
  EXPECT_EQ(queue.Lease(0, 1, kNoWait).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(queue.Lease(2, 1, kNoWait).status().code(), Code::kInvalidArgument);
}

TEST(BatchQueueTest, LeaseIdsAreRandom128BitHex) {
  BatchQueue queue;
  AddGroups(queue, {1, 2});
  std::string a = MustLease(queue, 1, 1).id;
  std::string b = MustLease(queue, 1, 1).id;
  for (const std::string& id : {a, b}) {
    EXPECT_EQ(id.size(), 32u);
    EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
  }
  EXPECT_NE(a, b);
}

TEST(BatchQueueTest, StatsCountLeasedAndQueuedGroups) {
  BatchQueue queue;
  AddGroups(queue, {1, 2, 3, 4});
  BatchLease a = MustLease(queue, 2, 2);
  MustLease(queue, 1, 1);
  BatchQueueStats stats = queue.Stats();
  EXPECT_EQ(stats.queued, 1);
  EXPECT_EQ(stats.leased, 3);
  EXPECT_EQ(stats.live_leases, 2);
  ASSERT_TRUE(queue.Ack(a.id).ok());
  stats = queue.Stats();
  EXPECT_EQ(stats.leased, 1);
  EXPECT_EQ(stats.live_leases, 1);
  EXPECT_EQ(stats.consumed, 2);
  EXPECT_FALSE(stats.closed);
}

}  // namespace
}  // namespace flashroll
