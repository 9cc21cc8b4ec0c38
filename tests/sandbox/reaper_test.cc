// The reaper retries failed teardowns with back-off, reports each attempt,
// never lets a slow teardown hold up another, and drains at destruction.
#include "sandbox/reaper.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <mutex>
#include <vector>

namespace flashroll::sandbox {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// Collects reports; thread-safe.
struct Reports {
  std::mutex mu;
  std::vector<Reaper::Report> all;
  std::function<void(const Reaper::Report&)> Callback() {
    return [this](const Reaper::Report& report) {
      std::lock_guard<std::mutex> lock(mu);
      all.push_back(report);
    };
  }
  std::vector<Reaper::Report> Of(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<Reaper::Report> out;
    for (const auto& r : all) {
      if (r.id == id) out.push_back(r);
    }
    return out;
  }
};

Reaper::Options Fast() {
  Reaper::Options options;
  options.first_backoff = milliseconds(10);
  options.max_backoff = milliseconds(40);
  options.drain_timeout = milliseconds(2000);
  return options;
}

bool WaitFor(const std::function<bool()>& done, milliseconds timeout = milliseconds(5000)) {
  const auto deadline = Clock::now() + timeout;
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(2));
  }
  return true;
}

TEST(ReaperTest, RetriesAFailedTeardownUntilItSucceedsAndReportsEachAttempt) {
  Reports reports;
  Reaper reaper(Fast(), reports.Callback());
  std::atomic<int> calls{0};
  std::vector<Clock::time_point> times(3);
  reaper.Submit("a", [&]() -> Status {
    const int n = calls++;
    times[n] = Clock::now();
    return n < 2 ? Status::IoError("rmdir /x: busy") : Status::Ok();
  });
  ASSERT_TRUE(WaitFor([&] { return reaper.stats().pending == 0; }));
  EXPECT_EQ(calls, 3);
  const auto got = reports.Of("a");
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].outcome, Reaper::Outcome::kRetrying);
  EXPECT_EQ(got[0].attempt, 1);
  EXPECT_EQ(got[0].status.message(), "rmdir /x: busy");
  EXPECT_EQ(got[0].next_retry, milliseconds(10));
  EXPECT_EQ(got[1].attempt, 2);
  EXPECT_EQ(got[1].next_retry, milliseconds(20));  // doubled
  EXPECT_EQ(got[2].outcome, Reaper::Outcome::kFinished);
  EXPECT_EQ(got[2].attempt, 3);
  EXPECT_GE(times[1] - times[0], milliseconds(10));
  EXPECT_GE(times[2] - times[1], milliseconds(20));
  const auto stats = reaper.stats();
  EXPECT_EQ(stats.failed_attempts, 2u);
  EXPECT_EQ(stats.finished, 1u);
  EXPECT_EQ(stats.abandoned, 0u);
}

TEST(ReaperTest, BackoffStopsGrowingAtTheMaximum) {
  Reports reports;
  Reaper reaper(Fast(), reports.Callback());
  std::atomic<int> calls{0};
  reaper.Submit("a", [&]() -> Status { return ++calls < 6 ? Status::IoError("busy") : Status::Ok(); });
  ASSERT_TRUE(WaitFor([&] { return reaper.stats().pending == 0; }));
  const auto got = reports.Of("a");
  ASSERT_EQ(got.size(), 6u);
  EXPECT_EQ(got[2].next_retry, milliseconds(40));
  EXPECT_EQ(got[4].next_retry, milliseconds(40));
}

TEST(ReaperTest, ACallersFailedFirstAttemptIsReportedAndRetriedAfterTheBackoff) {
  Reports reports;
  Reaper reaper(Fast(), reports.Callback());
  const auto submitted = Clock::now();
  std::promise<Clock::time_point> ran;
  reaper.Submit(
      "a",
      [&]() -> Status {
        ran.set_value(Clock::now());
        return Status::Ok();
      },
      Status::DeadlineExceeded("init 7 not reaped"));
  auto first = reports.Of("a");
  ASSERT_EQ(first.size(), 1u);  // reported before Submit returns
  EXPECT_EQ(first[0].attempt, 1);
  EXPECT_EQ(first[0].status.code(), Code::kDeadlineExceeded);
  EXPECT_GE(ran.get_future().get() - submitted, milliseconds(10));
  ASSERT_TRUE(WaitFor([&] { return reaper.stats().pending == 0; }));
  EXPECT_EQ(reports.Of("a").back().outcome, Reaper::Outcome::kFinished);
  EXPECT_EQ(reports.Of("a").back().attempt, 2);
}

TEST(ReaperTest, ABlockedTeardownDoesNotHoldUpOthers) {
  Reports reports;
  Reaper reaper(Fast(), reports.Callback());
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> blocked_started{false};
  reaper.Submit("blocked", [&]() -> Status {
    blocked_started = true;
    released.wait();
    return Status::Ok();
  });
  ASSERT_TRUE(WaitFor([&] { return blocked_started.load(); }));
  for (int i = 0; i < 3; ++i) {
    reaper.Submit("other" + std::to_string(i), [] { return Status::Ok(); });
  }
  EXPECT_TRUE(WaitFor([&] { return reaper.stats().finished == 3; }, milliseconds(2000)))
      << "teardowns waited for the blocked one";
  EXPECT_EQ(reaper.stats().pending, 1u);
  release.set_value();
  ASSERT_TRUE(WaitFor([&] { return reaper.stats().pending == 0; }));
}

TEST(ReaperTest, DestructionGivesPendingTeardownsTheirLastAttemptsAtOnce) {
  Reports reports;
  Reaper::Options options = Fast();
  options.first_backoff = milliseconds(60000);  // would wait a minute without the drain
  std::atomic<int> calls{0};
  const auto start = Clock::now();
  {
    Reaper reaper(options, reports.Callback());
    reaper.Submit("a", [&]() -> Status { return ++calls < 2 ? Status::IoError("busy") : Status::Ok(); });
    ASSERT_TRUE(WaitFor([&] { return calls == 1; }));
  }
  EXPECT_LT(Clock::now() - start, milliseconds(2000));
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(reports.Of("a").back().outcome, Reaper::Outcome::kFinished);
}

TEST(ReaperTest, DestructionAbandonsWhatStillFailsAtTheDrainDeadline) {
  Reports reports;
  Reaper::Options options = Fast();
  options.drain_timeout = milliseconds(100);
  const auto start = Clock::now();
  {
    Reaper reaper(options, reports.Callback());
    reaper.Submit("stuck", [] { return Status::DeadlineExceeded("init 9 not reaped"); });
  }
  EXPECT_LT(Clock::now() - start, milliseconds(2000));
  const auto got = reports.Of("stuck");
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got.back().outcome, Reaper::Outcome::kAbandoned);
  EXPECT_EQ(got.back().status.message(), "init 9 not reaped");
  for (size_t i = 0; i + 1 < got.size(); ++i) EXPECT_EQ(got[i].outcome, Reaper::Outcome::kRetrying);
}

}  // namespace
}  // namespace flashroll::sandbox
