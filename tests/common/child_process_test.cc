#include "common/child_process.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

namespace flashroll {
namespace {

using std::chrono::milliseconds;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ChildProcessTest, ExitCodeEnvironmentAndOutput) {
  const std::string out = ::testing::TempDir() + "/child_output.txt";
  std::filesystem::remove(out);
  ChildOptions options;
  options.argv = {"/bin/sh", "-c", "echo \"$GREETING from $(pwd)\"; echo err >&2; exit 3"};
  options.env = {{"GREETING", "hello"}};
  options.working_dir = "/tmp";
  options.output_path = out;
  auto child = ChildProcess::Start(options);
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  EXPECT_EQ((*child)->Wait(), 3);
  EXPECT_EQ((*child)->Wait(), 3);  // reaped once, remembered
  EXPECT_EQ(ReadAll(out), "hello from /tmp\nerr\n");
}

TEST(ChildProcessTest, ProgramLookedUpInPath) {
  ChildOptions options;
  options.argv = {"true"};
  auto child = ChildProcess::Start(options);
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  EXPECT_EQ((*child)->Wait(), 0);
}

TEST(ChildProcessTest, MissingProgramIsAnErrorBeforeStartReturns) {
  ChildOptions options;
  options.argv = {"/nonexistent/trainer"};
  auto child = ChildProcess::Start(options);
  ASSERT_FALSE(child.ok());
  EXPECT_EQ(child.status().code(), Code::kNotFound);
  EXPECT_NE(child.status().message().find("exec /nonexistent/trainer: No such file"), std::string::npos)
      << child.status().message();
  options.argv = {};
  EXPECT_EQ(ChildProcess::Start(options).status().code(), Code::kInvalidArgument);
  options.argv = {"true"};
  options.output_path = "/nonexistent/dir/log";
  EXPECT_EQ(ChildProcess::Start(options).status().code(), Code::kIoError);
}

TEST(ChildProcessTest, WaitTimesOutWhileRunningAndStopEndsIt) {
  ChildOptions options;
  options.argv = {"sleep", "30"};
  auto child = ChildProcess::Start(options);
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  EXPECT_EQ((*child)->Wait(milliseconds(50)), std::nullopt);
  EXPECT_EQ((*child)->Stop(), 128 + SIGTERM);
}

TEST(ChildProcessTest, StopKillsAChildThatIgnoresSigterm) {
  ChildOptions options;
  options.argv = {"/bin/sh", "-c", "trap '' TERM; echo ready; sleep 30"};
  const std::string out = ::testing::TempDir() + "/child_ready.txt";
  std::filesystem::remove(out);
  options.output_path = out;
  auto child = ChildProcess::Start(options);
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  for (int i = 0; i < 500 && ReadAll(out).empty(); ++i) usleep(10'000);  // the trap is set
  EXPECT_EQ((*child)->Stop(milliseconds(100)), 128 + SIGKILL);
}

TEST(ChildProcessTest, StopEndsWhatTheChildStartedToo) {
  const std::string pidfile = ::testing::TempDir() + "/grandchild.pid";
  std::filesystem::remove(pidfile);
  ChildOptions options;
  options.argv = {"/bin/sh", "-c", "sleep 30 & echo $! > " + pidfile + "; wait"};
  auto child = ChildProcess::Start(options);
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  for (int i = 0; i < 500 && ReadAll(pidfile).empty(); ++i) usleep(10'000);
  const pid_t grandchild = static_cast<pid_t>(std::stol(ReadAll(pidfile)));
  ASSERT_EQ(::kill(grandchild, 0), 0) << "the shell's sleep runs";
  (*child)->Stop();
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    // Reaped by init once killed; until then it may linger as a zombie.
    std::ifstream stat("/proc/" + std::to_string(grandchild) + "/stat");
    std::string text;
    std::getline(stat, text);
    gone = text.empty() || text.find(") Z ") != std::string::npos;
    if (!gone) usleep(10'000);
  }
  EXPECT_TRUE(gone) << "the sleep the shell started outlived Stop";
}

TEST(ChildProcessTest, DestroyingTheHandleReapsTheChild) {
  ChildOptions options;
  options.argv = {"sleep", "30"};
  auto child = ChildProcess::Start(options);
  ASSERT_TRUE(child.ok()) << child.status().ToString();
  const pid_t pid = (*child)->pid();
  child->reset();
  errno = 0;
  EXPECT_EQ(::kill(pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
}

}  // namespace
}  // namespace flashroll
