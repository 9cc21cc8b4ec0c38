#include "scheduler/sample_scheduler.h"

#include <optional>
#include <set>
#include <vector>

#include <gtest/gtest.h>

namespace flashroll {
namespace {

using Clock = SampleScheduler::Clock;

std::vector<GroupPlan> Groups(std::vector<std::pair<int64_t, std::string>> task_family, int effort = 100) {
  std::vector<GroupPlan> plan;
  for (size_t i = 0; i < task_family.size(); ++i) {
    plan.push_back({static_cast<int64_t>(i + 1), task_family[i].first, task_family[i].second, effort, {}});
  }
  return plan;
}

SchedulerPolicy SchedulerPolicyOf(int64_t g, int64_t in_flight, int64_t per_task) {
  SchedulerPolicy p;
  p.group_size = g;
  p.max_in_flight = in_flight;
  p.max_per_task = per_task;
  p.staleness_gate = false;
  return p;
}

std::vector<SampleTicket> Drain(SampleScheduler& s, Clock::time_point now) {
  std::vector<SampleTicket> out;
  while (auto t = s.Next(now)) out.push_back(*t);
  return out;
}

TEST(SampleSchedulerTest, GroupsOpenWholeUnderTheInFlightCap) {
  const auto t0 = Clock::now();
  SampleScheduler s(SchedulerPolicyOf(4, 8, 8), Groups({{0, "a"}, {1, "a"}, {2, "a"}}), t0);
  auto started = Drain(s, t0);
  ASSERT_EQ(started.size(), 8u);
  EXPECT_EQ(s.in_flight(), 8);
  EXPECT_EQ(started[0].group_id, 1);
  EXPECT_EQ(started[4].group_id, 2);
  // One finished sample frees one slot, not room for a group of 4.
  EXPECT_TRUE(s.Finish(started[0], 100, false));
  EXPECT_FALSE(s.Next(t0));
  for (int i = 1; i < 4; ++i) s.Finish(started[i], 100, false);
  EXPECT_EQ(s.TakeFinishedGroups(), std::vector<int64_t>{1});
  auto more = Drain(s, t0);
  ASSERT_EQ(more.size(), 4u);
  EXPECT_EQ(more[0].group_id, 3);
  for (int slot = 0; slot < 4; ++slot) EXPECT_EQ(more[slot].slot, slot);
}

TEST(SampleSchedulerTest, ACappedTaskWaitsWhileOtherTasksGo) {
  const auto t0 = Clock::now();
  // Task 0 at two efforts, then task 1: per-task cap 4 = one group of task 0.
  SampleScheduler s(SchedulerPolicyOf(4, 16, 4), Groups({{0, "a"}, {0, "a"}, {1, "a"}}), t0);
  auto started = Drain(s, t0);
  ASSERT_EQ(started.size(), 8u);
  EXPECT_EQ(started[0].group_id, 1);
  EXPECT_EQ(started[4].group_id, 3) << "task 1's group overtakes task 0's second group";
  for (int i = 0; i < 4; ++i) s.Finish(started[i], 10, false);
  auto more = Drain(s, t0);
  ASSERT_EQ(more.size(), 4u);
  EXPECT_EQ(more[0].group_id, 2);
}

TEST(SampleSchedulerTest, StalenessBoundHoldsDispatchUntilTheTrainerConsumes) {
  const auto t0 = Clock::now();
  SchedulerPolicy p = SchedulerPolicyOf(2, 64, 64);
  p.staleness_gate = true;
  p.max_staleness = 1;
  p.batch_groups = 1;
  SampleScheduler s(p, Groups({{0, "a"}, {1, "a"}, {2, "a"}, {3, "a"}}), t0);
  // (max_staleness + 1) * batch_groups = 2 groups may run ahead of the trainer.
  auto started = Drain(s, t0);
  EXPECT_EQ(started.size(), 4u);
  for (const auto& t : started) s.Finish(t, 10, false);
  EXPECT_FALSE(s.Next(t0)) << "finished but not consumed: still ahead of the trainer";
  s.Consumed(1);
  EXPECT_EQ(Drain(s, t0).size(), 2u);
  EXPECT_FALSE(s.Next(t0));
}

TEST(SampleSchedulerTest, WithoutAGateNothingWaitsForATrainer) {
  const auto t0 = Clock::now();
  SchedulerPolicy p = SchedulerPolicyOf(2, 64, 64);
  p.max_staleness = 0;
  p.batch_groups = 1;
  SampleScheduler s(p, Groups({{0, "a"}, {1, "a"}, {2, "a"}}), t0);
  EXPECT_EQ(Drain(s, t0).size(), 6u);
}

TEST(SampleSchedulerTest, WarmupDropsShortEarlySamplesAndRerunsTheirSlot) {
  const auto t0 = Clock::now();
  SchedulerPolicy p = SchedulerPolicyOf(2, 8, 8);
  p.warmup_samples = 2;
  p.warmup_min_tokens = 50;
  SampleScheduler s(p, Groups({{0, "a"}}), t0);
  auto started = Drain(s, t0);
  ASSERT_EQ(started.size(), 2u);
  EXPECT_FALSE(s.Finish(started[0], 10, false)) << "short and inside the warm-up window: dropped";
  auto rerun = s.Next(t0);
  ASSERT_TRUE(rerun);
  EXPECT_EQ(rerun->slot, started[0].slot);
  EXPECT_EQ(rerun->attempt, 1);
  EXPECT_TRUE(s.Finish(started[1], 60, false)) << "long enough";
  EXPECT_TRUE(s.Finish(*rerun, 10, false)) << "past the window, short samples count";
  EXPECT_EQ(s.samples_dropped(), 1);
  EXPECT_TRUE(s.done());
}

TEST(SampleSchedulerTest, FailedSamplesAreNeverDroppedAsShort) {
  const auto t0 = Clock::now();
  SchedulerPolicy p = SchedulerPolicyOf(1, 8, 8);
  p.warmup_samples = 5;
  p.warmup_min_tokens = 50;
  SampleScheduler s(p, Groups({{0, "a"}}), t0);
  auto t = s.Next(t0);
  EXPECT_TRUE(s.Finish(*t, 0, /*failed=*/true));
  EXPECT_TRUE(s.done());
}

// An infrastructure failure re-runs its slot (first in line, a new attempt)
// within infra_retries; once a slot spent them it counts, failed, and its
// task is quarantined: its groups not opened yet leave the plan. A failure
// of the agent's own counts at once and quarantines nothing.
TEST(SampleSchedulerTest, InfrastructureFailuresRerunTheSlotThenQuarantineTheTask) {
  const auto t0 = Clock::now();
  SchedulerPolicy policy = SchedulerPolicyOf(2, 2, 2);
  policy.infra_retries = 2;
  SampleScheduler s(policy, Groups({{0, "a"}, {1, "a"}, {0, "a"}, {1, "a"}}), t0);
  EXPECT_EQ(s.groups_total(), 4);
  auto started = Drain(s, t0);
  ASSERT_EQ(started.size(), 2u);  // group 1: task 0
  EXPECT_TRUE(s.Finish(started[0], 10, /*failed=*/true)) << "the agent's failure counts";
  EXPECT_TRUE(s.quarantined().empty());
  SampleTicket slot = started[1];
  for (int retry = 1; retry <= 2; ++retry) {
    EXPECT_FALSE(s.Finish(slot, 0, true, /*infra=*/true)) << "retry " << retry;
    auto again = s.Next(t0);
    ASSERT_TRUE(again.has_value());
    EXPECT_EQ(again->group_id, slot.group_id);
    EXPECT_EQ(again->slot, slot.slot);
    EXPECT_EQ(again->attempt, retry);
    EXPECT_EQ(again->infra_attempt, retry);
    slot = *again;
  }
  EXPECT_EQ(s.infra_retried(), 2);
  EXPECT_TRUE(s.Finish(slot, 0, true, /*infra=*/true)) << "its retries spent, the slot counts";
  EXPECT_EQ(s.quarantined(), (std::set<int64_t>{0}));
  EXPECT_EQ(s.groups_quarantined(), 1) << "group 3, task 0's other group, never opens";
  EXPECT_EQ(s.groups_total(), 3);
  EXPECT_EQ(s.TakeFinishedGroups(), std::vector<int64_t>{1});
  std::vector<int64_t> opened;
  for (auto next = Drain(s, t0); !next.empty(); next = Drain(s, t0)) {
    for (const SampleTicket& t : next) {
      EXPECT_NE(t.task_index, 0);
      opened.push_back(t.group_id);
      s.Finish(t, 10, false);
    }
  }
  EXPECT_EQ(opened, (std::vector<int64_t>{2, 2, 4, 4}));
  EXPECT_TRUE(s.done());
}

TEST(SampleSchedulerTest, RateLimitedFamilyWaitsWhileOthersGo) {
  const auto t0 = Clock::now();
  SchedulerPolicy p = SchedulerPolicyOf(2, 64, 64);
  p.rate_limits["slow"] = 1.0;  // samples per second: a group of 2 every 2 s
  SampleScheduler s(p, Groups({{0, "slow"}, {1, "slow"}, {2, "fast"}}), t0);
  auto started = Drain(s, t0);
  ASSERT_EQ(started.size(), 4u);
  EXPECT_EQ(started[0].group_id, 1);
  EXPECT_EQ(started[2].group_id, 3) << "the fast family is not held by the slow one";
  EXPECT_FALSE(s.Next(t0 + std::chrono::milliseconds(1500)));
  auto later = s.Next(t0 + std::chrono::milliseconds(2100));
  ASSERT_TRUE(later);
  EXPECT_EQ(later->group_id, 2);
}

TEST(SampleSchedulerTest, SynchronousRoundsWaitForTheWholeRound) {
  const auto t0 = Clock::now();
  SchedulerPolicy p = SchedulerPolicyOf(2, 4, 4);
  p.synchronous = true;
  SampleScheduler s(p, Groups({{0, "a"}, {1, "a"}, {2, "a"}}), t0);
  auto round = Drain(s, t0);
  ASSERT_EQ(round.size(), 4u);
  for (int i = 0; i < 3; ++i) s.Finish(round[i], 5, false);  // group 1 done, group 2 not
  EXPECT_FALSE(s.Next(t0)) << "asynchronous dispatch would open group 3 here";
  s.Finish(round[3], 5, false);
  EXPECT_EQ(Drain(s, t0).size(), 2u);
}

TEST(SampleSchedulerTest, AResumedJobRunsOnlyTheMissingSlots) {
  const auto t0 = Clock::now();
  auto plan = Groups({{0, "a"}, {1, "a"}, {2, "a"}});
  plan[0].slots_done = {0, 1, 2, 3};  // finished before the job stopped
  plan[1].slots_done = {0, 1, 3};    // slot 2 was running
  SampleScheduler s(SchedulerPolicyOf(4, 4, 4), plan, t0);
  EXPECT_EQ(s.groups_total(), 3);
  EXPECT_EQ(s.groups_finished(), 1);
  auto started = Drain(s, t0);
  ASSERT_EQ(started.size(), 1u) << "group 3 needs 4 slots; only 3 are free while group 2's last runs";
  EXPECT_EQ(started[0].group_id, 2);
  EXPECT_EQ(started[0].slot, 2) << "the missing slot, not the next number after the finished count";
  s.Finish(started[0], 10, false);
  EXPECT_EQ(s.TakeFinishedGroups(), std::vector<int64_t>{2});
  EXPECT_EQ(Drain(s, t0).size(), 4u);
}

// Task selection: a group `select` refuses never opens and leaves the
// plan (the total shrinks, so done() still comes); a group of a resumed job
// with slots already finished is not asked about.
TEST(SampleSchedulerTest, AGroupSelectRefusesIsDroppedAndTheNextOneOpens) {
  const auto t0 = Clock::now();
  SchedulerPolicy p = SchedulerPolicyOf(2, 2, 2);
  std::vector<int64_t> asked;
  p.select = [&](const GroupPlan& g) {
    asked.push_back(g.group_id);
    return g.group_id != 2 && g.group_id != 3;
  };
  auto plan = Groups({{0, "a"}, {1, "a"}, {2, "a"}, {3, "a"}, {4, "a"}});
  plan[2].slots_done = {0};  // group 3 resumed: its missing slot runs
  SampleScheduler s(p, plan, t0);
  std::vector<int64_t> ran;
  while (!s.done()) {
    auto started = Drain(s, t0);
    ASSERT_FALSE(started.empty()) << "nothing startable with " << s.groups_finished() << " of " << s.groups_total();
    for (const auto& t : started) {
      s.Finish(t, 10, false);
      if (ran.empty() || ran.back() != t.group_id) ran.push_back(t.group_id);
    }
  }
  EXPECT_EQ(ran, (std::vector<int64_t>{1, 3, 4, 5}));
  EXPECT_EQ(asked, (std::vector<int64_t>{1, 2, 4, 5}));
  EXPECT_EQ(s.groups_deselected(), 1);
  EXPECT_EQ(s.groups_total(), 4);
}

TEST(SampleSchedulerTest, LossMaskKeepsSampledTokensWithinTheBound) {
  const std::vector<int32_t> versions = {-1, -1, 3, 4, 5, 5, -1};
  EXPECT_EQ(SampleScheduler::LossMask(versions, 5, 1), (std::vector<uint8_t>{0, 0, 0, 1, 1, 1, 0}));
  EXPECT_EQ(SampleScheduler::LossMask(versions, 5, 0), (std::vector<uint8_t>{0, 0, 0, 0, 1, 1, 0}));
  EXPECT_EQ(SampleScheduler::LossMask(versions, 5, 2), (std::vector<uint8_t>{0, 0, 1, 1, 1, 1, 0}));
}

}  // namespace
}  // namespace flashroll
