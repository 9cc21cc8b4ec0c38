// Crashes raise repercussion events quickly: root filesystem damage, an OOM
// kill and the death of PID 1. Each test measures the latency from the
// moment the host caused (or saw) the crash to the event's timestamp,
// prints it, and asserts a generous bound (the goal is 100 ms; CI machines
// are shared).
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>

#include "tests/sandbox/sandbox_fixture.h"

namespace flashroll::sandbox {
namespace {

constexpr auto kBound = std::chrono::milliseconds(1000);

class CrashEventsTest : public SandboxFixture {
 protected:
  // Waits for the first event of `kind` after `cursor` (up to 5 s).
  std::optional<SandboxEvent> WaitFor(const std::string& id, EventKind kind, uint64_t* cursor) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < deadline) {
      auto page = manager_->WaitEvents(id, *cursor, std::chrono::milliseconds(500));
      if (!page.ok()) return std::nullopt;
      for (const auto& event : page->events) {
        *cursor = event.seq;
        if (event.kind == kind) return event;
      }
      if (page->closed) return std::nullopt;
    }
    return std::nullopt;
  }

  // Kinds of all events of `id` so far, as names.
  std::vector<std::string> Kinds(const std::string& id) {
    std::vector<std::string> kinds;
    auto page = manager_->EventsSince(id, 0);
    if (page.ok()) {
      for (const auto& event : page->events) kinds.push_back(EventKindName(event.kind));
    }
    return kinds;
  }

  static double Ms(std::chrono::system_clock::duration d) {
    return std::chrono::duration<double, std::milli>(d).count();
  }
};

TEST_F(CrashEventsTest, DeletingOrReplacingEssentialFilesRaisesRootfsDamage) {
  SandboxSpec spec;
  spec.image = ImageKind::kBusybox;
  const std::string id = CreateOrDie(spec);
  uint64_t cursor = 0;
  // Harmless changes: new files in /bin, anything in /tmp or /root.
  EXPECT_EQ(Sh(id, "touch /bin/newtool /tmp/x /root/y && rm /tmp/x").exit_code, 0);

  const auto start = std::chrono::system_clock::now();
  const ExecResult r = Run(id, {"/bin/busybox", "rm", "/bin/ls"});
  const auto returned = std::chrono::system_clock::now();
  EXPECT_EQ(r.exit_code, 0) << r.stderr_data;
  auto event = WaitFor(id, EventKind::kRootfsDamage, &cursor);
  ASSERT_TRUE(event.has_value()) << ::testing::PrintToString(Kinds(id));
  EXPECT_EQ(event->detail, "/bin/ls deleted");
  std::printf("rootfs_damage latency: %.2f ms after the exec started (the exec took %.2f ms)\n",
              Ms(event->time - start), Ms(returned - start));
  EXPECT_LT(event->time - start, kBound);

  // Replacing /bin/sh by a rename over it.
  EXPECT_EQ(Run(id, {"/bin/busybox", "sh", "-c", "cp /bin/busybox /tmp/sh && mv /tmp/sh /bin/sh"}).exit_code, 0);
  event = WaitFor(id, EventKind::kRootfsDamage, &cursor);
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->detail, "/bin/sh replaced");
  // Deleting /usr/bin wholesale.
  EXPECT_EQ(Run(id, {"/bin/busybox", "rm", "-rf", "/usr/bin"}).exit_code, 0);
  event = WaitFor(id, EventKind::kRootfsDamage, &cursor);
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->detail.rfind("/usr/bin", 0), 0u) << event->detail;
  ASSERT_TRUE(manager_->Destroy(id).ok());
  // The harmless changes raised nothing.
  for (const auto& kind : Kinds(id)) EXPECT_NE(kind, "init_exit");
}

TEST_F(CrashEventsTest, HostImageReadOnlyBindsAreNotDamageable) {
  const std::string id = CreateOrDie();
  EXPECT_NE(Sh(id, "rm -f /usr/bin/ls").exit_code, 0);
  ASSERT_TRUE(manager_->Destroy(id).ok());
  EXPECT_EQ(Kinds(id), (std::vector<std::string>{"created", "destroyed"}));
}

TEST_F(CrashEventsTest, OomKillRaisesOom) {
  SandboxSpec spec;
  spec.memory_bytes = 48 << 20;
  const std::string id = CreateOrDie(spec);
  uint64_t cursor = 0;
  const auto start = std::chrono::system_clock::now();
  const ExecResult r = Run(id, {"python3", "-c", "a = bytearray(512 << 20); a[::4096] = b'x' * len(a[::4096])"});
  const auto returned = std::chrono::system_clock::now();
  EXPECT_TRUE(r.oom_killed);
  EXPECT_EQ(r.exit_code, 137);
  auto event = WaitFor(id, EventKind::kOom, &cursor);
  ASSERT_TRUE(event.has_value()) << ::testing::PrintToString(Kinds(id));
  // The kill happened before the exec returned; the event must not trail
  // the exec's return by more than the bound.
  std::printf("oom latency: event %.2f ms after the exec started, %.2f ms %s the exec returned\n",
              Ms(event->time - start), std::abs(Ms(event->time - returned)),
              event->time <= returned ? "before" : "after");
  EXPECT_LT(event->time - returned, kBound);
  // The sandbox survives an OOM kill of a command.
  EXPECT_EQ(Run(id, {"true"}).exit_code, 0);
}

TEST_F(CrashEventsTest, InitExitRaisesInitExitAndTheSandboxIsDestroyed) {
  const std::string id = CreateOrDie();
  auto info = manager_->Info(id);
  ASSERT_TRUE(info.ok());
  uint64_t cursor = 0;
  const auto start = std::chrono::system_clock::now();
  ASSERT_EQ(kill(info->init_pid, SIGKILL), 0);
  auto event = WaitFor(id, EventKind::kInitExit, &cursor);
  ASSERT_TRUE(event.has_value()) << ::testing::PrintToString(Kinds(id));
  // Seen at the control socket's hang-up (status not known yet) or the
  // pidfd (with the signal).
  EXPECT_TRUE(event->detail == "PID 1 died" || event->detail == "PID 1 killed by signal 9") << event->detail;
  std::printf("init_exit latency: %.2f ms after the SIGKILL (%s)\n", Ms(event->time - start),
              event->detail.c_str());
  EXPECT_LT(event->time - start, kBound);
  auto destroyed = WaitFor(id, EventKind::kDestroyed, &cursor);
  ASSERT_TRUE(destroyed.has_value());
  EXPECT_EQ(destroyed->detail, "init exited");
  EXPECT_EQ(manager_->Info(id).status().code(), Code::kNotFound);
  EXPECT_TRUE(CgroupDirsWithPrefix(id).empty());
}

}  // namespace
}  // namespace flashroll::sandbox
