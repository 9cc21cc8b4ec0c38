#include "sandbox/spec.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/socket.h>

namespace flashroll::sandbox {
namespace {

TEST(SandboxSpecTest, ParsesIpv4RuleWithPrefix) {
  auto rule = ParseAllowRule("10.1.0.0/16:443");
  ASSERT_TRUE(rule.ok()) << rule.status().ToString();
  EXPECT_EQ(rule->family, AF_INET);
  EXPECT_EQ(rule->prefix_len, 16);
  EXPECT_EQ(rule->port, 443);
  EXPECT_EQ(rule->address[0], 10);
  EXPECT_EQ(rule->address[1], 1);
}

TEST(SandboxSpecTest, ParsesIpv6RuleAndAnyPort) {
  auto rule = ParseAllowRule("fd00::1:*");
  ASSERT_TRUE(rule.ok()) << rule.status().ToString();
  EXPECT_EQ(rule->family, AF_INET6);
  EXPECT_EQ(rule->prefix_len, 128);
  EXPECT_EQ(rule->port, 0);
  auto bracketed = ParseAllowRule("[::1]/128:80");
  ASSERT_TRUE(bracketed.ok()) << bracketed.status().ToString();
  EXPECT_EQ(bracketed->address[15], 1);
}

TEST(SandboxSpecTest, RejectsBadRules) {
  for (const char* bad : {"10.0.0.1", "10.0.0.1:0", "10.0.0.1:70000", "10.0.0.0/33:80", "host:80", ":80"}) {
    auto rule = ParseAllowRule(bad);
    EXPECT_FALSE(rule.ok()) << bad;
    if (!rule.ok()) {
      EXPECT_EQ(rule.status().code(), Code::kInvalidArgument);
      EXPECT_NE(rule.status().message().find(bad), std::string::npos) << rule.status().message();
    }
  }
}

TEST(SandboxSpecTest, ParsesImages) {
  SandboxSpec spec;
  ASSERT_TRUE(ParseImage("busybox", &spec).ok());
  EXPECT_EQ(spec.image, ImageKind::kBusybox);
  ASSERT_TRUE(ParseImage("/usr", &spec).ok());
  EXPECT_EQ(spec.image, ImageKind::kDirectory);
  EXPECT_EQ(spec.image_dir, "/usr");
  EXPECT_EQ(ParseImage("relative/dir", &spec).code(), Code::kInvalidArgument);
  EXPECT_EQ(ParseImage("/no/such/image/dir", &spec).code(), Code::kNotFound);
}

TEST(SandboxSpecTest, ParsesNetMode) {
  EXPECT_EQ(*ParseNetMode("none"), NetMode::kNone);
  EXPECT_EQ(*ParseNetMode("policy"), NetMode::kPolicy);
  EXPECT_FALSE(ParseNetMode("host").ok());
}

TEST(SandboxSpecTest, ValidatesFields) {
  SandboxSpec spec;
  EXPECT_TRUE(ValidateSpec(spec).ok());

  SandboxSpec allow_without_policy;
  allow_without_policy.allow.push_back(*ParseAllowRule("1.2.3.4:80"));
  EXPECT_EQ(ValidateSpec(allow_without_policy).code(), Code::kInvalidArgument);

  SandboxSpec tiny_memory;
  tiny_memory.memory_bytes = 1024;
  EXPECT_EQ(ValidateSpec(tiny_memory).code(), Code::kInvalidArgument);

  SandboxSpec bad_rw;
  bad_rw.rw_paths = {"relative"};
  EXPECT_EQ(ValidateSpec(bad_rw).code(), Code::kInvalidArgument);
  bad_rw.rw_paths = {"/"};
  EXPECT_EQ(ValidateSpec(bad_rw).code(), Code::kInvalidArgument);

  SandboxSpec comma_image;
  comma_image.image = ImageKind::kDirectory;
  comma_image.image_dir = "/tmp/a,upperdir=/etc";
  EXPECT_EQ(ValidateSpec(comma_image).code(), Code::kInvalidArgument);

  SandboxSpec bad_cpuset;
  bad_cpuset.cpuset = "0;1";
  EXPECT_EQ(ValidateSpec(bad_cpuset).code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace flashroll::sandbox
