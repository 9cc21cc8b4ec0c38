// The node API's request policy (sandbox/api/policy.h), tried as an
// attacker would: host paths as images and profiles, `..` and symlinks out
// of the workspace root, prefix tricks, limits above the maximum.
#include "sandbox/api/policy.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "common/json.h"

namespace flashroll::sandbox::api {
namespace {

namespace fs = std::filesystem;

class PolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/flashroll-policy-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
    // ws is the root; ws2 shares its prefix; ws/a and ws/b are workspaces.
    for (const char* sub : {"ws/a/deep", "ws/b", "ws2", "outside"}) fs::create_directories(dir_ + "/" + sub);
    fs::create_directory_symlink("/etc", dir_ + "/ws/a/to-etc");
    fs::create_directory_symlink("../../outside", dir_ + "/ws/a/to-outside");
    fs::create_directory_symlink("../b", dir_ + "/ws/a/to-b");
    policy_.workspace_root = dir_ + "/ws";
    policy_.images["python"] = {dir_ + "/store/python", {}};
    policy_.seccomp_profiles["strict"] = dir_ + "/profiles/strict.json";
  }
  void TearDown() override { fs::remove_all(dir_); }

  Result<SandboxSpec> Admit(SpecRequest request) { return AdmitSpec(policy_, std::move(request), "body"); }

  Result<SandboxSpec> AdmitRw(const std::string& path) {
    SpecRequest request;
    request.spec.rw_paths = {path};
    return Admit(request);
  }

  // Expects a 403 whose message starts with `field` and contains `needle`.
  static void ExpectDenied(const Result<SandboxSpec>& result, const std::string& field,
                           const std::string& needle = "") {
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.status().code(), Code::kPermissionDenied) << result.status().ToString();
    EXPECT_EQ(result.status().message().rfind(field + ": ", 0), 0u) << result.status().ToString();
    EXPECT_NE(result.status().message().find(needle), std::string::npos) << result.status().ToString();
  }

  std::string dir_;
  NodePolicy policy_;
};

TEST_F(PolicyTest, ImagesAreNamesNeverHostPaths) {
  for (const char* path : {"/", "/etc", "/srv/img:latest", "../python", "python/..", "./python"}) {
    SpecRequest request;
    request.image = path;
    ExpectDenied(Admit(request), "body.image", "is a path");
  }
  SpecRequest unknown;
  unknown.image = "ubuntu";
  ExpectDenied(Admit(unknown), "body.image", "unknown image \"ubuntu\" (this node serves host, busybox, python)");
  SpecRequest with_ref;
  with_ref.image = "python:3.12";
  ExpectDenied(Admit(with_ref), "body.image", "unknown image");
}

TEST_F(PolicyTest, NamedImagesResolveToTheirTrees) {
  SpecRequest request;
  request.image = "python";
  auto spec = Admit(request);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->image, ImageKind::kDirectory);
  EXPECT_EQ(spec->image_dir, dir_ + "/store/python");
  request.image = "busybox";
  ASSERT_TRUE(Admit(request).ok());
  EXPECT_EQ(Admit(request)->image, ImageKind::kBusybox);
  request.image = "host";
  EXPECT_EQ(Admit(request)->image, ImageKind::kHost);
}

TEST_F(PolicyTest, SeccompProfilesAreNamesNeverPaths) {
  for (const char* path : {"/etc/shadow", "/tmp/p.json", "../strict", "strict/x", "..", "."}) {
    SpecRequest request;
    request.spec.seccomp = path;
    ExpectDenied(Admit(request), "body.seccomp", "is a path");
  }
  SpecRequest unknown;
  unknown.spec.seccomp = "lax";
  ExpectDenied(Admit(unknown), "body.seccomp", "unknown seccomp profile \"lax\" (this node has default, strict)");
  SpecRequest plain;
  auto spec = Admit(plain);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->seccomp, "default");
}

TEST_F(PolicyTest, RwPathsOnlyStrictlyBeneathTheWorkspaceRoot) {
  ExpectDenied(AdmitRw("/etc"), "body.rw_paths[0]", "is not beneath the workspace root " + dir_ + "/ws");
  ExpectDenied(AdmitRw(dir_ + "/ws/../outside"), "body.rw_paths[0]", "leads out of it");
  ExpectDenied(AdmitRw(dir_ + "/ws/a/../../ws2"), "body.rw_paths[0]");
  // A prefix of the root's name is not beneath it.
  ExpectDenied(AdmitRw(dir_ + "/ws2"), "body.rw_paths[0]");
  // The root holds every workspace.
  ExpectDenied(AdmitRw(dir_ + "/ws"), "body.rw_paths[0]");
  ExpectDenied(AdmitRw(dir_ + "/ws/"), "body.rw_paths[0]", "the workspace root itself");
  ExpectDenied(AdmitRw(dir_ + "/ws/a/.."), "body.rw_paths[0]", "the workspace root itself");
  // Symlinks inside the root, whether they point out of it or not: one
  // swapped in after the check could point anywhere, so none is followed.
  ExpectDenied(AdmitRw(dir_ + "/ws/a/to-etc"), "body.rw_paths[0]", "symlink on the way");
  ExpectDenied(AdmitRw(dir_ + "/ws/a/to-etc/passwd"), "body.rw_paths[0]", "symlink on the way");
  ExpectDenied(AdmitRw(dir_ + "/ws/a/to-outside"), "body.rw_paths[0]", "symlink on the way");
  ExpectDenied(AdmitRw(dir_ + "/ws/a/to-b"), "body.rw_paths[0]", "symlink on the way");

  SpecRequest two;
  two.spec.rw_paths = {dir_ + "/ws/a", "/etc"};
  ExpectDenied(Admit(two), "body.rw_paths[1]");
}

// Whether a host path exists is nobody's business: a path out of the root
// is refused the same way whether it exists or not.
TEST_F(PolicyTest, RwPathsOutOfTheRootRevealNothingAboutTheHost) {
  const Result<SandboxSpec> exists = AdmitRw(dir_ + "/ws/../outside");
  const Result<SandboxSpec> missing = AdmitRw(dir_ + "/ws/../no-such-dir");
  ExpectDenied(exists, "body.rw_paths[0]");
  ExpectDenied(missing, "body.rw_paths[0]");
  fs::create_directory_symlink("/no/such/dir", dir_ + "/ws/a/to-nothing");
  ExpectDenied(AdmitRw(dir_ + "/ws/a/to-nothing"), "body.rw_paths[0]", "symlink on the way");
  ExpectDenied(AdmitRw(dir_ + "/ws/a/to-etc/no-such-file"), "body.rw_paths[0]", "symlink on the way");
}

TEST_F(PolicyTest, RwPathsBeneathTheRootAreBoundAtTheirResolvedPath) {
  auto spec = AdmitRw(dir_ + "/ws/a/deep/../deep");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->rw_paths, std::vector<std::string>{dir_ + "/ws/a/deep"});
  // The descriptor the path was checked through travels with the spec: it,
  // not the path, is what gets bound.
  ASSERT_EQ(spec->rw_held.size(), 1u);
  EXPECT_EQ(spec->rw_held[0]->path, dir_ + "/ws/a/deep");
  struct stat st {};
  ASSERT_EQ(::stat((dir_ + "/ws/a/deep").c_str(), &st), 0);
  EXPECT_EQ(spec->rw_held[0]->dev, st.st_dev);
  EXPECT_EQ(spec->rw_held[0]->ino, st.st_ino);
  struct stat held {};
  ASSERT_EQ(::fstat(spec->rw_held[0]->fd.get(), &held), 0);
  EXPECT_EQ(held.st_ino, st.st_ino);
}

TEST_F(PolicyTest, RwPathsAreRefusedWithoutAWorkspaceRoot) {
  policy_.workspace_root.clear();
  ExpectDenied(AdmitRw(dir_ + "/ws/a"), "body.rw_paths[0]", "no workspace_root");
}

TEST_F(PolicyTest, MalformedAndMissingRwPathsAreNot403) {
  auto relative = AdmitRw("ws/a");
  EXPECT_EQ(relative.status().code(), Code::kInvalidArgument) << relative.status().ToString();
  EXPECT_NE(relative.status().message().find("body.rw_paths[0]"), std::string::npos);
  auto missing = AdmitRw(dir_ + "/ws/none");
  EXPECT_EQ(missing.status().code(), Code::kNotFound) << missing.status().ToString();
  EXPECT_NE(missing.status().message().find("body.rw_paths[0]"), std::string::npos);
}

TEST_F(PolicyTest, WhatTheSpecItselfRefusesIs400NamingTheBody) {
  SpecRequest request;
  request.spec.memory_bytes = 1u << 20;
  auto spec = Admit(request);
  EXPECT_EQ(spec.status().code(), Code::kInvalidArgument) << spec.status().ToString();
  EXPECT_NE(spec.status().message().find("body: memory: must be at least 4M"), std::string::npos)
      << spec.status().ToString();
}

TEST_F(PolicyTest, LimitsLeftOutGetTheDefaults) {
  policy_.defaults = {64u << 20, 32, 0.5, 16u << 20, std::chrono::minutes(5), "0"};
  auto spec = Admit(SpecRequest());
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->memory_bytes, 64u << 20);
  EXPECT_EQ(spec->pids, 32);
  EXPECT_EQ(spec->cpus, 0.5);
  EXPECT_EQ(spec->disk_bytes, 16u << 20);
  EXPECT_EQ(spec->ttl, std::chrono::minutes(5));
  EXPECT_EQ(spec->cpuset, "0");

  SpecRequest asked;
  asked.spec.memory_bytes = 128u << 20;
  asked.spec.pids = 8;
  asked.spec.cpus = 2;
  asked.spec.disk_bytes = 32u << 20;
  asked.spec.ttl = std::chrono::seconds(30);
  asked.spec.cpuset = "0-1";
  spec = Admit(asked);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->memory_bytes, 128u << 20);
  EXPECT_EQ(spec->pids, 8);
  EXPECT_EQ(spec->cpus, 2);
  EXPECT_EQ(spec->disk_bytes, 32u << 20);
  EXPECT_EQ(spec->ttl, std::chrono::seconds(30));
  EXPECT_EQ(spec->cpuset, "0-1");
}

TEST_F(PolicyTest, TheBareDefaultsAreSane) {
  const NodePolicy bare;
  EXPECT_EQ(bare.defaults.memory_bytes, 512u << 20);
  EXPECT_EQ(bare.defaults.pids, 256);
  EXPECT_EQ(bare.defaults.cpus, 1.0);
  EXPECT_EQ(bare.max.memory_bytes, uint64_t{4} << 30);
  EXPECT_EQ(bare.defaults.ttl, std::chrono::hours(1));
  EXPECT_EQ(bare.max.ttl, std::chrono::hours(24));
  EXPECT_TRUE(bare.images.empty());
  EXPECT_TRUE(bare.workspace_root.empty());
  EXPECT_TRUE(bare.seccomp_profiles.empty());
}

TEST_F(PolicyTest, LimitsAboveTheMaximumAre403NamingFieldAndMaximum) {
  SpecRequest memory;
  memory.spec.memory_bytes = (uint64_t{4} << 30) + 1;
  ExpectDenied(Admit(memory), "body.memory", "is above this node's maximum of 4G");
  SpecRequest pids;
  pids.spec.pids = 4097;
  ExpectDenied(Admit(pids), "body.pids", "4097 is above this node's maximum of 4096");
  SpecRequest cpus;
  cpus.spec.cpus = 4.5;
  ExpectDenied(Admit(cpus), "body.cpus", "4.5 is above this node's maximum of 4");
  SpecRequest disk;
  disk.spec.disk_bytes = uint64_t{8} << 30;
  ExpectDenied(Admit(disk), "body.disk", "8G is above this node's maximum of 4G");

  SpecRequest at_max;
  at_max.spec.memory_bytes = uint64_t{4} << 30;
  at_max.spec.pids = 4096;
  at_max.spec.cpus = 4;
  at_max.spec.disk_bytes = uint64_t{4} << 30;
  EXPECT_TRUE(Admit(at_max).ok());
}

// A client that asks to live for ever, or pins itself to every CPU of the
// node, is held to the node's maxima (issue 27 item 3).
TEST_F(PolicyTest, TtlAndCpusetHaveNodeMaxima) {
  SpecRequest forever;  // ttl 0: "never expires"
  auto spec = Admit(forever);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->ttl, std::chrono::hours(1));  // the bare node's default
  policy_.defaults.ttl = std::chrono::milliseconds(0);
  spec = Admit(forever);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->ttl, std::chrono::hours(24));  // no default: the maximum, never "for ever"

  SpecRequest long_lived;
  long_lived.spec.ttl = std::chrono::hours(24) + std::chrono::milliseconds(1);
  ExpectDenied(Admit(long_lived), "body.ttl", "86400001ms is above this node's maximum of 24h");
  long_lived.spec.ttl = std::chrono::hours(24);
  EXPECT_TRUE(Admit(long_lived).ok());
  policy_.max.ttl = std::chrono::milliseconds(0);  // no maximum: for ever is allowed
  spec = Admit(forever);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->ttl.count(), 0);

  policy_.max.cpuset = "2-3,6";
  SpecRequest unpinned;
  spec = Admit(unpinned);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->cpuset, "2-3,6");  // no default: pinned to the maximum, not to every CPU
  for (const char* outside : {"0-7", "1", "2-4", "6,7"}) {
    SpecRequest pinned;
    pinned.spec.cpuset = outside;
    ExpectDenied(Admit(pinned), "body.cpuset", "outside this node's cpuset 2-3,6");
  }
  for (const char* inside : {"2", "3,6", "2-3", "2-3,6"}) {
    SpecRequest pinned;
    pinned.spec.cpuset = inside;
    spec = Admit(pinned);
    ASSERT_TRUE(spec.ok()) << inside << ": " << spec.status().ToString();
    EXPECT_EQ(spec->cpuset, inside);
  }
  SpecRequest malformed;
  malformed.spec.cpuset = "3-1";
  spec = Admit(malformed);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), Code::kInvalidArgument) << spec.status().ToString();
  EXPECT_EQ(spec.status().message().rfind("body.cpuset: ", 0), 0u) << spec.status().ToString();
  policy_.defaults.cpuset = "3";
  spec = Admit(unpinned);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->cpuset, "3");
}

// Scopes that name images and workspaces confine a token's creates
// (issue 27 item 2): a token for workspace "a" cannot bind "b", nor a
// directory whose name only starts with "a", and a token for image
// "python" cannot start the host image.
TEST_F(PolicyTest, GrantsConfineImagesAndWorkspaces) {
  fs::create_directories(dir_ + "/ws/ab");
  const ClientGrant grant = GrantOf({"create", "exec", "image:python", "workspace:a"});
  EXPECT_EQ(grant.images, (std::vector<std::string>{"python"}));
  EXPECT_EQ(grant.workspaces, (std::vector<std::string>{"a"}));
  auto admit = [&](const std::string& image, std::vector<std::string> rw) {
    SpecRequest request;
    request.image = image;
    request.spec.rw_paths = std::move(rw);
    return AdmitSpec(policy_, std::move(request), "body", grant);
  };
  ExpectDenied(admit("host", {}), "body.image", "\"host\" is not among this token's images (python)");
  ExpectDenied(admit("busybox", {}), "body.image", "not among this token's images");
  EXPECT_TRUE(admit("python", {}).ok());
  EXPECT_TRUE(admit("python", {dir_ + "/ws/a"}).ok());
  EXPECT_TRUE(admit("python", {dir_ + "/ws/a/deep"}).ok());
  EXPECT_TRUE(admit("python", {dir_ + "/ws/b/../a/deep"}).ok());
  ExpectDenied(admit("python", {dir_ + "/ws/b"}), "body.rw_paths[0]", "is outside this token's workspaces (a beneath");
  ExpectDenied(admit("python", {dir_ + "/ws/ab"}), "body.rw_paths[0]", "outside this token's workspaces");
  ExpectDenied(admit("python", {dir_ + "/ws/a/deep", dir_ + "/ws/a/../b"}), "body.rw_paths[1]",
               "outside this token's workspaces");
  // Without such scopes a token is confined by the node policy only.
  SpecRequest host;
  host.spec.rw_paths = {dir_ + "/ws/b"};
  EXPECT_TRUE(AdmitSpec(policy_, host, "body", GrantOf({"create"})).ok());

  EXPECT_TRUE(CheckGrantScope("image:busybox").ok());
  EXPECT_TRUE(CheckGrantScope("workspace:job-1").ok());
  EXPECT_TRUE(CheckGrantScope("exec").ok());
  for (const char* bad : {"image:../etc", "image:", "workspace:", "workspace:a/b", "workspace:..", "workspace:."}) {
    EXPECT_EQ(CheckGrantScope(bad).code(), Code::kInvalidArgument) << bad;
  }
}

// An exec's timeout and output cap: the maximum itself is allowed, one
// millisecond more is 403, and the message gives both in the unit that
// reads best (issue 26 mutation survivors: > vs >=, the minute divisor).
TEST_F(PolicyTest, ExecLimitsAllowTheMaximumAndNameTheExcess) {
  auto exec = [&](const Json& body) { return AdmitExec(policy_, JsonView(body, "body")); };
  auto at_max = exec({{"cmd", {"true"}}, {"timeout", 3'600'000}, {"max_output_bytes", 16u << 20}});
  ASSERT_TRUE(at_max.ok()) << at_max.status().ToString();
  EXPECT_EQ(at_max->timeout, std::chrono::hours(1));
  EXPECT_EQ(at_max->max_output_bytes, 16u << 20);
  auto over = exec({{"cmd", {"true"}}, {"timeout", "90m"}});
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), Code::kPermissionDenied);
  EXPECT_EQ(over.status().message(), "body.timeout: 90m is above this node's maximum of 1h");
  policy_.exec.max_timeout = std::chrono::minutes(2);
  over = exec({{"cmd", {"true"}}, {"timeout", "150s"}});
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().message(), "body.timeout: 150s is above this node's maximum of 2m");
  over = exec({{"cmd", {"true"}}, {"max_output_bytes", (16u << 20) + 1}});
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().message(),
            "body.max_output_bytes: 16777217 bytes is above this node's maximum of 16M");
  auto defaulted = exec({{"cmd", {"true"}}});
  ASSERT_TRUE(defaulted.ok()) << defaulted.status().ToString();
  EXPECT_EQ(defaulted->timeout, std::chrono::minutes(2));  // the default, capped by the maximum
}

// Every interface address of the node is host-local, not only the metadata
// address: a rule for the loopback address is refused too.
TEST_F(PolicyTest, EgressToTheNodesOwnInterfacesIsRefused) {
  for (const char* rule : {"127.0.0.1:80", "127.0.0.0/8:*", "::1:22", "169.254.169.254:80"}) {
    SpecRequest request;
    request.spec.net = NetMode::kPolicy;
    request.spec.allow = {ParseAllowRule(rule).value()};
    ExpectDenied(Admit(request), "body.allow[0]", "an address of this node");
  }
  SpecRequest elsewhere;
  elsewhere.spec.net = NetMode::kPolicy;
  elsewhere.spec.allow = {ParseAllowRule("198.51.100.1:443").value()};
  EXPECT_TRUE(Admit(elsewhere).ok());
}

}  // namespace
}  // namespace flashroll::sandbox::api
