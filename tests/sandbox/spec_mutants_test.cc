// Boundaries of the sandbox spec's checks (sandbox/spec.h), one assertion per
// edge: each check here has a mutant (scripts/mutate.py) that only these catch.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "sandbox/spec.h"

namespace flashroll::sandbox {
namespace {

Code RuleCode(const char* text) { return ParseAllowRule(text).status().code(); }

TEST(SpecMutantsTest, PortBounds) {
  EXPECT_EQ(ParseAllowRule("10.0.0.1:1")->port, 1);
  EXPECT_EQ(ParseAllowRule("10.0.0.1:65535")->port, 65535);
  EXPECT_EQ(RuleCode("10.0.0.1:65536"), Code::kInvalidArgument);
  EXPECT_EQ(RuleCode("10.0.0.1:0"), Code::kInvalidArgument);
  EXPECT_EQ(RuleCode("10.0.0.1:"), Code::kInvalidArgument);
  EXPECT_EQ(RuleCode("10.0.0.1:80x"), Code::kInvalidArgument);
  EXPECT_EQ(RuleCode("10.0.0.1:-1"), Code::kInvalidArgument);
  EXPECT_EQ(RuleCode("10.0.0.1:99999999999999999999999"), Code::kInvalidArgument);
  auto any = ParseAllowRule("10.0.0.1:*");
  ASSERT_TRUE(any.ok());
  EXPECT_EQ(any->port, 0);
  EXPECT_EQ(any->text, "10.0.0.1:*");
}

TEST(SpecMutantsTest, PrefixBounds) {
  EXPECT_EQ(ParseAllowRule("10.0.0.0/0:80")->prefix_len, 0);
  EXPECT_EQ(ParseAllowRule("10.0.0.0/32:80")->prefix_len, 32);
  EXPECT_EQ(ParseAllowRule("10.0.0.0/8:80")->prefix_len, 8);
  EXPECT_EQ(ParseAllowRule("10.0.0.1:80")->prefix_len, 32);
  EXPECT_EQ(RuleCode("10.0.0.0/33:80"), Code::kInvalidArgument);
  EXPECT_EQ(RuleCode("10.0.0.0/x:80"), Code::kInvalidArgument);
  EXPECT_EQ(ParseAllowRule("fd00::/128:80")->prefix_len, 128);
  EXPECT_EQ(ParseAllowRule("fd00::/64:80")->prefix_len, 64);
  EXPECT_EQ(ParseAllowRule("fd00:::80")->prefix_len, 128);
  EXPECT_EQ(RuleCode("fd00::/129:80"), Code::kInvalidArgument);
  Status bad = ParseAllowRule("10.0.0.0/33:80").status();
  EXPECT_NE(bad.message().find("0..32"), std::string::npos) << bad.ToString();
  EXPECT_NE(ParseAllowRule("::/129:80").status().message().find("0..128"), std::string::npos);
}

TEST(SpecMutantsTest, Addresses) {
  auto v4 = ParseAllowRule("192.168.7.9:22");
  ASSERT_TRUE(v4.ok());
  EXPECT_EQ(v4->family, AF_INET);
  EXPECT_EQ(v4->address[0], 192);
  EXPECT_EQ(v4->address[3], 9);
  auto v6 = ParseAllowRule("[fd00::2]:443");
  ASSERT_TRUE(v6.ok()) << v6.status().ToString();
  EXPECT_EQ(v6->family, AF_INET6);
  EXPECT_EQ(v6->address[0], 0xfd);
  EXPECT_EQ(v6->address[15], 2);
  EXPECT_EQ(RuleCode("[fd00::2:443"), Code::kInvalidArgument);
  EXPECT_EQ(RuleCode("[]:443"), Code::kInvalidArgument);
  EXPECT_EQ(RuleCode("[:443"), Code::kInvalidArgument);
  EXPECT_EQ(RuleCode("]:443"), Code::kInvalidArgument);
  EXPECT_EQ(RuleCode("1.2.3:443"), Code::kInvalidArgument);
  Status missing = ParseAllowRule("10.0.0.1").status();
  EXPECT_NE(missing.message().find("missing :PORT"), std::string::npos) << missing.ToString();
  EXPECT_NE(missing.message().find("(expected IP[/N]:PORT)"), std::string::npos) << missing.ToString();
}

TEST(SpecMutantsTest, NetModes) {
  EXPECT_EQ(ParseNetMode("none").value(), NetMode::kNone);
  EXPECT_EQ(ParseNetMode("policy").value(), NetMode::kPolicy);
  EXPECT_EQ(ParseNetMode("").status().code(), Code::kInvalidArgument);
  EXPECT_NE(ParseNetMode("host").status().message().find("'host'"), std::string::npos);
}

class SpecMutantsFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/spec_mutants_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }
  std::string dir_;
};

TEST_F(SpecMutantsFilesTest, Images) {
  SandboxSpec spec;
  spec.image_ref = "stale";
  ASSERT_TRUE(ParseImage("host", &spec).ok());
  EXPECT_EQ(spec.image, ImageKind::kHost);
  EXPECT_TRUE(spec.image_dir.empty());
  EXPECT_TRUE(spec.image_ref.empty());

  ASSERT_TRUE(ParseImage(dir_, &spec).ok());
  EXPECT_EQ(spec.image, ImageKind::kDirectory);
  EXPECT_EQ(spec.image_dir, dir_);
  ASSERT_TRUE(ParseImage("busybox", &spec).ok());
  EXPECT_EQ(spec.image, ImageKind::kBusybox);
  EXPECT_TRUE(spec.image_dir.empty());
  ASSERT_TRUE(ParseImage(dir_, &spec).ok());
  ASSERT_TRUE(ParseImage("host", &spec).ok());
  EXPECT_TRUE(spec.image_dir.empty());

  EXPECT_EQ(ParseImage("", &spec).code(), Code::kInvalidArgument);
  // A reference needs an OCI layout; an empty one is refused first.
  Status empty_ref = ParseImage(dir_ + ":", &spec);
  EXPECT_EQ(empty_ref.code(), Code::kInvalidArgument);
  EXPECT_NE(empty_ref.message().find("empty reference"), std::string::npos) << empty_ref.ToString();
  Status no_layout = ParseImage(dir_ + ":latest", &spec);
  EXPECT_EQ(no_layout.code(), Code::kInvalidArgument);
  EXPECT_NE(no_layout.message().find("no oci-layout file"), std::string::npos) << no_layout.ToString();
  std::ofstream(dir_ + "/file") << "x";
  Status file = ParseImage(dir_ + "/file", &spec);
  EXPECT_EQ(file.code(), Code::kInvalidArgument);
  EXPECT_NE(file.message().find("not a directory"), std::string::npos) << file.ToString();

  std::ofstream(dir_ + "/oci-layout") << R"({"imageLayoutVersion": "1.0.0"})";
  std::ofstream(dir_ + "/index.json") << R"({"schemaVersion": 2, "manifests": []})";
  Status with_ref = ParseImage(dir_ + ":v1:extra", &spec);
  ASSERT_TRUE(with_ref.ok()) << with_ref.ToString();
  EXPECT_EQ(spec.image_dir, dir_);
  EXPECT_EQ(spec.image_ref, "v1:extra");
}

TEST(SpecMutantsTest, ImageDirectoryChecks) {
  SandboxSpec spec;
  spec.image = ImageKind::kDirectory;
  spec.image_dir = "/usr";
  EXPECT_TRUE(ValidateSpec(spec).ok());
  spec.image_dir = "";
  EXPECT_EQ(ValidateSpec(spec).code(), Code::kInvalidArgument);
  spec.image_dir = "usr";
  EXPECT_EQ(ValidateSpec(spec).code(), Code::kInvalidArgument);
  for (const char* bad : {"/a,b", "/a:b", "/a\\b", "/a\nb"}) {
    spec.image_dir = bad;
    EXPECT_EQ(ValidateSpec(spec).code(), Code::kInvalidArgument) << bad;
  }
  // The manager's own state: the per-sandbox layers live under /run/flashroll.
  for (const char* inside : {"/run/flashroll", "/run/flashroll/", "/run/flashroll/abc/root"}) {
    spec.image_dir = inside;
    Status s = ValidateSpec(spec);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << inside;
    EXPECT_NE(s.message().find("may not be under /run/flashroll"), std::string::npos) << s.ToString();
  }
  for (const char* outside : {"/run/flashrollx", "/run", "/srv/run/flashroll"}) {
    spec.image_dir = outside;
    EXPECT_TRUE(ValidateSpec(spec).ok()) << outside;
  }
  // Host and busybox images carry no directory to check.
  spec.image = ImageKind::kHost;
  spec.image_dir = "/run/flashroll";
  EXPECT_TRUE(ValidateSpec(spec).ok());
}

TEST(SpecMutantsTest, LimitBounds) {
  SandboxSpec spec;
  spec.pids = -1;
  EXPECT_EQ(ValidateSpec(spec).code(), Code::kInvalidArgument);
  spec.pids = 0;
  EXPECT_TRUE(ValidateSpec(spec).ok());
  spec.pids = 1;
  EXPECT_TRUE(ValidateSpec(spec).ok());

  spec.cpus = -0.01;
  EXPECT_EQ(ValidateSpec(spec).code(), Code::kInvalidArgument);
  spec.cpus = 4096;
  EXPECT_TRUE(ValidateSpec(spec).ok());
  spec.cpus = 4096.5;
  EXPECT_EQ(ValidateSpec(spec).code(), Code::kInvalidArgument);
  spec.cpus = 0;

  spec.memory_bytes = (uint64_t{4} << 20) - 1;
  EXPECT_EQ(ValidateSpec(spec).code(), Code::kInvalidArgument);
  spec.memory_bytes = uint64_t{4} << 20;
  EXPECT_TRUE(ValidateSpec(spec).ok());
  spec.memory_bytes = 0;
  EXPECT_TRUE(ValidateSpec(spec).ok());

  spec.disk_bytes = (uint64_t{1} << 20) - 1;
  EXPECT_EQ(ValidateSpec(spec).code(), Code::kInvalidArgument);
  spec.disk_bytes = uint64_t{1} << 20;
  EXPECT_TRUE(ValidateSpec(spec).ok());

  spec.cpuset = "0-1,3";
  EXPECT_TRUE(ValidateSpec(spec).ok());
  spec.cpuset = "0 1";
  EXPECT_EQ(ValidateSpec(spec).code(), Code::kInvalidArgument);
  spec.cpuset = "";

  spec.hostname = std::string(64, 'h');
  EXPECT_TRUE(ValidateSpec(spec).ok());
  spec.hostname = std::string(65, 'h');
  EXPECT_EQ(ValidateSpec(spec).code(), Code::kInvalidArgument);
  spec.hostname = "";
  EXPECT_EQ(ValidateSpec(spec).code(), Code::kInvalidArgument);
  spec.hostname = "h";
  EXPECT_TRUE(ValidateSpec(spec).ok());
}

TEST(SpecMutantsTest, AllowRulesNeedPolicy) {
  SandboxSpec spec;
  spec.allow.push_back(*ParseAllowRule("1.2.3.4:80"));
  EXPECT_EQ(ValidateSpec(spec).code(), Code::kInvalidArgument);
  spec.net = NetMode::kPolicy;
  EXPECT_TRUE(ValidateSpec(spec).ok());
  spec.allow.clear();
  EXPECT_TRUE(ValidateSpec(spec).ok());
}

TEST_F(SpecMutantsFilesTest, RwPaths) {
  SandboxSpec spec;
  spec.rw_paths = {dir_};
  EXPECT_TRUE(ValidateSpec(spec).ok());
  // "/tmp/.." is the host root: a path ending in /.. climbs like one containing /../.
  for (const std::string& climbing : {dir_ + "/..", dir_ + "/../" + dir_.substr(5), std::string("/tmp/.."),
                                      std::string("/..")}) {
    spec.rw_paths = {dir_, climbing};
    Status s = ValidateSpec(spec);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << climbing;
    EXPECT_NE(s.message().find("may not contain '..'"), std::string::npos) << s.ToString();
  }
  // Names that merely contain dots are fine.
  ASSERT_EQ(::mkdir((dir_ + "/..x").c_str(), 0700), 0);
  ASSERT_EQ(::mkdir((dir_ + "/x..").c_str(), 0700), 0);
  spec.rw_paths = {dir_ + "/..x", dir_ + "/x.."};
  EXPECT_TRUE(ValidateSpec(spec).ok()) << ValidateSpec(spec).ToString();

  spec.rw_paths = {""};
  EXPECT_EQ(ValidateSpec(spec).code(), Code::kInvalidArgument);
  spec.rw_paths = {"tmp"};
  EXPECT_EQ(ValidateSpec(spec).code(), Code::kInvalidArgument);
  spec.rw_paths = {dir_, "/"};
  Status root = ValidateSpec(spec);
  EXPECT_EQ(root.code(), Code::kInvalidArgument);
  EXPECT_NE(root.message().find("host root"), std::string::npos) << root.ToString();
  spec.rw_paths = {dir_ + "/missing"};
  EXPECT_EQ(ValidateSpec(spec).code(), Code::kNotFound);
}

TEST(SpecMutantsTest, SeccompProfilePath) {
  SandboxSpec spec;
  spec.seccomp = "default";
  EXPECT_TRUE(ValidateSpec(spec).ok());
  for (const char* bad : {"", "profile.json", "strict"}) {
    spec.seccomp = bad;
    Status s = ValidateSpec(spec);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("expected default or an absolute file path"), std::string::npos) << s.ToString();
  }
  spec.seccomp = "/no/such/profile.json";
  Status missing = ValidateSpec(spec);
  EXPECT_FALSE(missing.ok());
  EXPECT_EQ(missing.message().rfind("seccomp", 0), 0u) << missing.ToString();
}

}  // namespace
}  // namespace flashroll::sandbox
