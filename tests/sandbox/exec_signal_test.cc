// Manager::Signal: a signal reaches the running exec's command (not just a
// kill), arrives while the exec is still running (Signal does not wait for
// it), and the error cases. Needs root (skips otherwise).
#include <signal.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "sandbox/sandbox.h"
#include "tests/sandbox/sandbox_fixture.h"

namespace flashroll::sandbox {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

class ExecSignalTest : public SandboxFixture {
 protected:
  // Starts `script` under /bin/sh on another thread.
  std::future<ExecResult> ShAsync(const std::string& id, const std::string& script) {
    return std::async(std::launch::async, [this, id, script] { return Sh(id, script); });
  }

  // Waits until the command has created `path` in the sandbox.
  void WaitForFile(const std::string& id, const std::string& path) {
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (!manager_->GetFile(id, path).ok()) {
      ASSERT_LT(Clock::now(), deadline) << path << " never appeared in sandbox " << id;
      std::this_thread::sleep_for(milliseconds(10));
    }
  }

  // Sends `sig` as soon as an exec runs (kFailedPrecondition until then).
  Status SignalWhenRunning(const std::string& id, int sig) {
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    for (;;) {
      Status status = manager_->Signal(id, sig);
      if (status.code() != Code::kFailedPrecondition || Clock::now() > deadline) return status;
      std::this_thread::sleep_for(milliseconds(5));
    }
  }
};

// A trapped signal proves the command itself received it: the shell prints
// and exits 0 instead of dying. The signal goes to the whole group, so the
// foreground sleep dies too and the shell gets to run its trap at once.
TEST_F(ExecSignalTest, TrappedSignalReachesTheCommand) {
  const std::string id = CreateOrDie();
  const auto start = Clock::now();
  auto exec = ShAsync(id, "trap 'echo got-usr1; exit 0' USR1; touch /tmp/ready; sleep 30; echo not-signalled");
  WaitForFile(id, "/tmp/ready");
  const auto signal_start = Clock::now();
  Status sent = manager_->Signal(id, SIGUSR1);
  EXPECT_LT(Clock::now() - signal_start, std::chrono::seconds(1)) << "Signal waited for the exec";
  ASSERT_TRUE(sent.ok()) << sent.ToString();
  const ExecResult result = exec.get();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(result.stdout_data, "got-usr1\n");
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.signal, 0);
  EXPECT_FALSE(result.timed_out);
  EXPECT_FALSE(result.cancelled);
  EXPECT_TRUE(manager_->Destroy(id).ok());
}

TEST_F(ExecSignalTest, UntrappedSignalEndsTheCommand) {
  const std::string id = CreateOrDie();
  const auto start = Clock::now();
  auto exec = std::async(std::launch::async, [&] { return Run(id, {"/bin/sleep", "30"}); });
  Status sent = SignalWhenRunning(id, SIGTERM);
  ASSERT_TRUE(sent.ok()) << sent.ToString();
  const ExecResult result = exec.get();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(result.signal, SIGTERM);
  EXPECT_EQ(result.exit_code, 128 + SIGTERM);
  EXPECT_FALSE(result.timed_out);
  // The exec is over: a signal now has nothing to go to, and the sandbox
  // runs the next command undisturbed.
  EXPECT_EQ(manager_->Signal(id, SIGTERM).code(), Code::kFailedPrecondition);
  const ExecResult after = Sh(id, "echo fine");
  EXPECT_EQ(after.exit_code, 0);
  EXPECT_EQ(after.stdout_data, "fine\n");
  EXPECT_TRUE(manager_->Destroy(id).ok());
}

TEST_F(ExecSignalTest, NoRunningExecIsFailedPrecondition) {
  const std::string id = CreateOrDie();
  Status idle = manager_->Signal(id, SIGTERM);
  EXPECT_EQ(idle.code(), Code::kFailedPrecondition) << idle.ToString();
  EXPECT_NE(idle.message().find("no exec is running"), std::string::npos) << idle.ToString();
  EXPECT_EQ(Sh(id, "exit 0").exit_code, 0);
  EXPECT_EQ(manager_->Signal(id, SIGKILL).code(), Code::kFailedPrecondition);
  EXPECT_TRUE(manager_->Destroy(id).ok());
}

TEST_F(ExecSignalTest, FrozenSandboxIsFailedPrecondition) {
  const std::string id = CreateOrDie();
  ASSERT_TRUE(manager_->Freeze(id).ok());
  Status frozen = manager_->Signal(id, SIGTERM);
  EXPECT_EQ(frozen.code(), Code::kFailedPrecondition) << frozen.ToString();
  EXPECT_NE(frozen.message().find("frozen"), std::string::npos) << frozen.ToString();
  EXPECT_TRUE(manager_->Destroy(id).ok());
}

TEST_F(ExecSignalTest, BadSignalNumberIsInvalidArgument) {
  const std::string id = CreateOrDie();
  for (int bad : {0, -1, 65, 1000}) {
    Status status = manager_->Signal(id, bad);
    EXPECT_EQ(status.code(), Code::kInvalidArgument) << bad << ": " << status.ToString();
    EXPECT_NE(status.message().find("signal " + std::to_string(bad)), std::string::npos) << status.ToString();
  }
  EXPECT_TRUE(manager_->Destroy(id).ok());
}

TEST_F(ExecSignalTest, UnknownSandboxIsNotFound) {
  EXPECT_EQ(manager_->Signal("fr-1-1-424242", SIGTERM).code(), Code::kNotFound);
  const std::string id = CreateOrDie();
  ASSERT_TRUE(manager_->Destroy(id).ok());
  EXPECT_EQ(manager_->Signal(id, SIGTERM).code(), Code::kNotFound);
}

}  // namespace
}  // namespace flashroll::sandbox
