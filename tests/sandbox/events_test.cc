// The event log: cursors, waiting, retirement; and the manager's lifecycle events.
#include "sandbox/events.h"

#include <gtest/gtest.h>

#include <thread>

#include "tests/sandbox/sandbox_fixture.h"

namespace flashroll::sandbox {
namespace {

TEST(EventLogTest, CursorReturnsOnlyNewerEvents) {
  EventLog log;
  EXPECT_EQ(log.EventsSince("a", 0).status().code(), Code::kNotFound);
  EXPECT_EQ(log.Emit("a", EventKind::kCreated, ""), 1u);
  EXPECT_EQ(log.Emit("a", EventKind::kOom, "x"), 2u);
  EXPECT_EQ(log.Emit("b", EventKind::kCreated, ""), 1u);
  auto page = log.EventsSince("a", 0);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->events.size(), 2u);
  EXPECT_EQ(page->events[1].kind, EventKind::kOom);
  EXPECT_EQ(page->events[1].detail, "x");
  EXPECT_EQ(page->next_cursor, 2u);
  page = log.EventsSince("a", 2);
  ASSERT_TRUE(page.ok());
  EXPECT_TRUE(page->events.empty());
  EXPECT_EQ(page->next_cursor, 2u);
  EXPECT_FALSE(page->closed);
}

TEST(EventLogTest, WaitWakesOnEmitAndTimesOut) {
  EventLog log;
  log.Emit("a", EventKind::kCreated, "");
  const auto start = std::chrono::steady_clock::now();
  auto empty = log.WaitEventsSince("a", 1, std::chrono::milliseconds(50));
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->events.empty());
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(45));
  std::thread emitter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    log.Emit("a", EventKind::kRootfsDamage, "/bin/sh");
  });
  auto page = log.WaitEventsSince("a", 1, std::chrono::seconds(10));
  emitter.join();
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->events.size(), 1u);
  EXPECT_EQ(page->events[0].kind, EventKind::kRootfsDamage);
  EXPECT_STREQ(EventKindName(page->events[0].kind), "rootfs_damage");
}

TEST(EventLogTest, ClosedLogsStayReadableThenRetire) {
  EventLog log;
  log.Emit("a", EventKind::kDestroyed, "destroy");
  log.Close("a");
  EXPECT_EQ(log.Emit("a", EventKind::kOom, ""), 0u);
  auto page = log.WaitEventsSince("a", 1, std::chrono::seconds(10));  // closed: returns at once
  ASSERT_TRUE(page.ok());
  EXPECT_TRUE(page->closed);
  for (size_t i = 0; i < EventLog::kMaxRetiredSandboxes; ++i) {
    const std::string id = "r" + std::to_string(i);
    log.Emit(id, EventKind::kCreated, "");
    log.Close(id);
  }
  EXPECT_EQ(log.EventsSince("a", 0).status().code(), Code::kNotFound);
  EXPECT_TRUE(log.EventsSince("r1", 0).ok());
}

TEST(EventLogTest, KeepsOnlyTheNewestEvents) {
  EventLog log;
  for (size_t i = 0; i < EventLog::kMaxEventsPerSandbox + 10; ++i) log.Emit("a", EventKind::kOom, "");
  auto page = log.EventsSince("a", 0);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->events.size(), EventLog::kMaxEventsPerSandbox);
  EXPECT_EQ(page->events.front().seq, 11u);
}

class SandboxEventsTest : public SandboxFixture {};

TEST_F(SandboxEventsTest, CreateTimeoutAndDestroyAreLogged) {
  const std::string id = CreateOrDie();
  const ExecResult r = Run(id, {"sleep", "10"}, std::chrono::milliseconds(50));
  EXPECT_TRUE(r.timed_out);
  ASSERT_TRUE(manager_->Destroy(id).ok());
  auto page = manager_->EventsSince(id, 0);
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  ASSERT_EQ(page->events.size(), 3u);
  EXPECT_EQ(page->events[0].kind, EventKind::kCreated);
  EXPECT_EQ(page->events[1].kind, EventKind::kTimeout);
  EXPECT_EQ(page->events[2].kind, EventKind::kDestroyed);
  EXPECT_TRUE(page->closed);
  EXPECT_EQ(manager_->EventsSince("fr-no-such", 0).status().code(), Code::kNotFound);
}

}  // namespace
}  // namespace flashroll::sandbox
