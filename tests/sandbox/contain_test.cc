// The launch sequence applies Landlock: the overlay root would let a
// sandbox create files anywhere; Landlock confines writes to the writable
// trees.
#include "sandbox/contain.h"

#include <gtest/gtest.h>

#include "tests/sandbox/sandbox_fixture.h"

namespace flashroll::sandbox {
namespace {

TEST(DefaultLandlockRulesTest, TcpConnectLimitedToAllowedPortsOnlyInPolicyMode) {
  SandboxSpec spec;
  LandlockRules rules = DefaultLandlockRules(spec, MountPlan());
  EXPECT_FALSE(rules.restrict_tcp_connect);
  EXPECT_TRUE(rules.scope_signals);
  EXPECT_TRUE(rules.scope_abstract_unix_sockets);
  spec.net = NetMode::kPolicy;
  auto rule = ParseAllowRule("10.0.0.1:8080");
  ASSERT_TRUE(rule.ok());
  spec.allow.push_back(*rule);
  rules = DefaultLandlockRules(spec, MountPlan());
  EXPECT_TRUE(rules.restrict_tcp_connect);
  EXPECT_EQ(rules.tcp_connect_ports, std::vector<uint16_t>{8080});
  auto any = ParseAllowRule("10.0.0.2:*");
  ASSERT_TRUE(any.ok());
  spec.allow.push_back(*any);
  EXPECT_FALSE(DefaultLandlockRules(spec, MountPlan()).restrict_tcp_connect);
}

class ContainLandlockTest : public SandboxFixture {};

TEST_F(ContainLandlockTest, WritesToProcAndDevicesAreDeniedTheWritableLayerIsNot) {
  for (ImageKind image : {ImageKind::kHost, ImageKind::kBusybox}) {
    SandboxSpec spec;
    spec.image = image;
    const std::string id = CreateOrDie(spec);
    // procfs lets a process raise its own oom_score_adj and rename itself;
    // Landlock does not.
    ExecResult r = Sh(id, "echo 1000 > /proc/self/oom_score_adj; echo x > /proc/self/comm; echo done");
    EXPECT_EQ(r.stdout_data, "done\n");
    EXPECT_NE(r.stderr_data.find("/proc/self/oom_score_adj: Permission denied"), std::string::npos)
        << r.stderr_data;
    EXPECT_NE(r.stderr_data.find("/proc/self/comm: Permission denied"), std::string::npos) << r.stderr_data;
    // A file created at the root cannot be written; /tmp can, and runs what it holds.
    r = Sh(id, "echo x > /escape 2>/dev/null || echo denied");
    EXPECT_EQ(r.stdout_data, "denied\n");
    r = Sh(id, "echo x > /tmp/ok && cat /tmp/ok && "
               "printf '#!/bin/sh\\necho ran\\n' > /tmp/s && chmod +x /tmp/s && /tmp/s");
    EXPECT_EQ(r.exit_code, 0) << r.stderr_data;
    EXPECT_EQ(r.stdout_data, "x\nran\n");
    r = Sh(id, "echo x > /dev/null && echo null-ok");
    EXPECT_EQ(r.stdout_data, "null-ok\n") << r.stderr_data;
    ASSERT_TRUE(manager_->Destroy(id).ok());
  }
}

}  // namespace
}  // namespace flashroll::sandbox
