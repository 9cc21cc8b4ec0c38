#include "rollout/sandbox_workspace.h"

#include <unistd.h>

#include <gtest/gtest.h>

namespace flashroll {
namespace {

class SandboxWorkspaceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "sandboxes need root";
    auto manager = sandbox::Manager::Open();
    if (!manager.ok()) GTEST_SKIP() << manager.status().ToString();
    manager_ = std::move(*manager);
  }
  std::unique_ptr<sandbox::Manager> manager_;
};

TEST_F(SandboxWorkspaceTest, FilesAndCommandsMeetInTheWorkDirectory) {
  std::string id;
  {
    auto ws = SandboxWorkspace::Create(*manager_, sandbox::SandboxSpec{});
    ASSERT_TRUE(ws.ok()) << ws.status().ToString();
    id = (*ws)->id();
    ASSERT_TRUE((*ws)->WriteFile("data/in.txt", "3\n4\n").ok());
    auto r = (*ws)->Exec("awk '{s += $1} END {print s}' data/in.txt > out.txt && cat out.txt && pwd",
                         std::chrono::seconds(10));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->exit_code, 0) << r->stderr_text;
    EXPECT_EQ(r->stdout_text, "7\n/tmp/work\n");
    auto out = (*ws)->ReadFile("out.txt");
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(*out, "7\n");
    EXPECT_EQ((*ws)->ReadFile("../etc/passwd").status().code(), Code::kInvalidArgument);
    auto timeout = (*ws)->Exec("sleep 5", std::chrono::milliseconds(200));
    ASSERT_TRUE(timeout.ok());
    EXPECT_EQ(timeout->exit_code, 124);
  }
  // The workspace destroyed its sandbox.
  for (const std::string& live : manager_->List()) EXPECT_NE(live, id);
}

}  // namespace
}  // namespace flashroll
