// Edges of the network policy's rule checks (sandbox/net_policy.h): a /0
// prefix ("any address on this port") is a rule like any other; prefixes past
// the address width and unknown families are refused. Needs root and BPF.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "sandbox/net_policy.h"
#include "sandbox/spec.h"

namespace flashroll::sandbox {
namespace {

std::string CgroupV2Mount() {
  std::ifstream mounts("/proc/self/mounts");
  std::string line;
  while (std::getline(mounts, line)) {
    std::istringstream fields(line);
    std::string source, target, type;
    fields >> source >> target >> type;
    if (type == "cgroup2") return target;
  }
  return "";
}

class NetPolicyMutantsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (BPF and cgroups)";
    Result<NetPolicyManager*> manager = NetPolicyManager::Shared();
    if (!manager.ok()) GTEST_SKIP() << "no BPF: " << manager.status().ToString();
    manager_ = *manager;
    const std::string root = CgroupV2Mount();
    if (root.empty()) GTEST_SKIP() << "no cgroup v2 mount";
    cgroup_ = root + "/flashroll-netmut-" + std::to_string(::getpid());
    ASSERT_EQ(::mkdir(cgroup_.c_str(), 0755), 0) << cgroup_;
  }
  void TearDown() override {
    if (!cgroup_.empty()) ::rmdir(cgroup_.c_str());
  }
  Status AttachRules(const std::vector<AllowRule>& rules) {
    NetPolicy policy;
    policy.allow = rules;
    Result<NetPolicyAttachment> a = manager_->Attach(cgroup_, policy);
    if (!a.ok()) return a.status();
    return a->Detach();
  }

  NetPolicyManager* manager_ = nullptr;
  std::string cgroup_;
};

TEST_F(NetPolicyMutantsTest, PrefixBounds) {
  EXPECT_TRUE(AttachRules({*ParseAllowRule("0.0.0.0/0:443"), *ParseAllowRule("[::]/0:*")}).ok());
  EXPECT_TRUE(AttachRules({*ParseAllowRule("10.1.2.3/32:80"), *ParseAllowRule("fd00::1/128:80")}).ok());
  AllowRule wide = *ParseAllowRule("10.0.0.0/8:80");
  wide.prefix_len = 33;
  Status too_wide = AttachRules({wide});
  EXPECT_EQ(too_wide.code(), Code::kInvalidArgument);
  EXPECT_NE(too_wide.message().find("prefix length 33 out of range 0..32"), std::string::npos) << too_wide.ToString();
  AllowRule negative = *ParseAllowRule("fd00::/8:80");
  negative.prefix_len = -1;
  EXPECT_EQ(AttachRules({negative}).code(), Code::kInvalidArgument);
  AllowRule v6 = *ParseAllowRule("fd00::/8:80");
  v6.prefix_len = 129;
  EXPECT_EQ(AttachRules({v6}).code(), Code::kInvalidArgument);
  AllowRule unix_rule = *ParseAllowRule("10.0.0.1:80");
  unix_rule.family = AF_UNIX;
  Status family = AttachRules({unix_rule});
  EXPECT_EQ(family.code(), Code::kInvalidArgument);
  EXPECT_NE(family.message().find("neither AF_INET nor AF_INET6"), std::string::npos) << family.ToString();
}

// A moved attachment carries its cgroup (so detaching it removes that
// cgroup's entries); the moved-from one owns nothing.
TEST_F(NetPolicyMutantsTest, MovesCarryTheCgroup) {
  NetPolicy policy;
  policy.allow = {*ParseAllowRule("10.0.0.0/8:443")};
  Result<NetPolicyAttachment> a = manager_->Attach(cgroup_, policy);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  const uint64_t id = a->cgroup_id();
  EXPECT_NE(id, 0u);
  EXPECT_TRUE(a->attached());
  NetPolicyAttachment moved(std::move(*a));
  EXPECT_EQ(moved.cgroup_id(), id);
  EXPECT_EQ(a->cgroup_id(), 0u);  // NOLINT(bugprone-use-after-move): moved-from state is specified
  EXPECT_FALSE(a->attached());
  NetPolicyAttachment assigned;
  assigned = std::move(moved);
  EXPECT_EQ(assigned.cgroup_id(), id);
  EXPECT_TRUE(assigned.attached());
  EXPECT_EQ(moved.cgroup_id(), 0u);  // NOLINT(bugprone-use-after-move)
  EXPECT_FALSE(moved.attached());
  EXPECT_TRUE(assigned.Detach().ok());
  EXPECT_FALSE(assigned.attached());
}

}  // namespace
}  // namespace flashroll::sandbox
