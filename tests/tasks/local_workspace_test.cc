#include <gtest/gtest.h>

#include <filesystem>

#include "tasks/workspace.h"

namespace flashroll {
namespace {

TEST(LocalWorkspaceTest, ExecCapturesOutputAndExitCode) {
  auto ws = LocalWorkspace::Create();
  ASSERT_TRUE(ws.ok());
  auto r = (*ws)->Exec("echo out; echo err >&2; exit 3", std::chrono::seconds(5));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stdout_text, "out\n");
  EXPECT_EQ(r->stderr_text, "err\n");
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_FALSE(r->timed_out);
}

TEST(LocalWorkspaceTest, RunsInItsDirectory) {
  auto ws = LocalWorkspace::Create();
  ASSERT_TRUE(ws.ok());
  ASSERT_TRUE((*ws)->WriteFile("sub/a.txt", "hello\n").ok());
  auto r = (*ws)->Exec("cat sub/a.txt && echo made > b.txt", std::chrono::seconds(5));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stdout_text, "hello\n");
  EXPECT_EQ(*(*ws)->ReadFile("b.txt"), "made\n");
}

TEST(LocalWorkspaceTest, TimeoutKillsTheWholeGroup) {
  auto ws = LocalWorkspace::Create();
  ASSERT_TRUE(ws.ok());
  auto start = std::chrono::steady_clock::now();
  auto r = (*ws)->Exec("sleep 30 & sleep 30", std::chrono::milliseconds(200));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->timed_out);
  EXPECT_EQ(r->exit_code, 124);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(LocalWorkspaceTest, RefusesPathsOutsideAndCleansUp) {
  std::string dir;
  {
    auto ws = LocalWorkspace::Create();
    ASSERT_TRUE(ws.ok());
    dir = (*ws)->dir();
    EXPECT_EQ((*ws)->WriteFile("../escape.txt", "x").code(), Code::kInvalidArgument);
    EXPECT_EQ((*ws)->WriteFile("/etc/escape.txt", "x").code(), Code::kInvalidArgument);
    EXPECT_EQ((*ws)->ReadFile("missing.txt").status().code(), Code::kNotFound);
    EXPECT_TRUE(std::filesystem::exists(dir));
  }
  EXPECT_FALSE(std::filesystem::exists(dir));
}

}  // namespace
}  // namespace flashroll
