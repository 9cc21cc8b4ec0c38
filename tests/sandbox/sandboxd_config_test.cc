// The sandboxd config (sandbox/api/sandboxd_config.h): the file's rules with
// file:line: key errors, what the daemon loads from disk at start, and the
// rule that a non-loopback listener needs TLS.
#include "sandbox/api/sandboxd_config.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace flashroll::sandbox::api {
namespace {

namespace fs = std::filesystem;

constexpr char kMinimal[] = "kind: sandboxd\ntokens:\n  - {name: a, file: /t, scopes: [create]}\n";

Result<SandboxdConfig> Parse(const std::string& yaml) {
  auto file = ParseYaml(yaml, "node.yaml");
  if (!file.ok()) return file.status();
  return ParseSandboxdConfig(*file);
}

void ExpectError(const std::string& yaml, const std::string& expected) {
  auto config = Parse(yaml);
  ASSERT_FALSE(config.ok()) << yaml;
  EXPECT_EQ(config.status().code(), Code::kInvalidArgument);
  EXPECT_NE(config.status().message().find(expected), std::string::npos) << config.status().ToString();
}

TEST(SandboxdConfigTest, ReadsEveryKey) {
  auto config = Parse(R"(kind: sandboxd
listen: 0.0.0.0:7443
warm_pool: 2
netns_pool: 4
allow_unenforced_limits: true
keep_sandboxes: true
orphan_timeout: 10m
image_store: /srv/images
images: [python, node-20]
workspace_root: /srv/ws
seccomp_profiles: /etc/flashroll/seccomp
limits:
  default: {memory: 256M, pids: 64, cpus: 0.5, disk: 512M}
  max: {memory: 2G, pids: 512, cpus: 2, disk: 2G}
tokens:
  - {name: runner, file: /etc/flashroll/runner.token, scopes: [create, exec, files]}
  - {name: ops, file: /etc/flashroll/ops.token, scopes: [admin]}
tls: {cert: /etc/flashroll/cert.pem, key: /etc/flashroll/key.pem}
)");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->listen, "0.0.0.0:7443");
  EXPECT_EQ(config->warm_pool, 2);
  EXPECT_EQ(config->netns_pool, 4);
  EXPECT_TRUE(config->allow_unenforced_limits);
  EXPECT_TRUE(config->keep_sandboxes);
  EXPECT_EQ(config->orphan_timeout, std::chrono::minutes(10));
  EXPECT_EQ(config->image_store, "/srv/images");
  EXPECT_EQ(config->images, (std::vector<std::string>{"python", "node-20"}));
  EXPECT_EQ(config->workspace_root, "/srv/ws");
  EXPECT_EQ(config->seccomp_profiles, "/etc/flashroll/seccomp");
  EXPECT_EQ(config->defaults.memory_bytes, 256u << 20);
  EXPECT_EQ(config->defaults.pids, 64);
  EXPECT_EQ(config->defaults.cpus, 0.5);
  EXPECT_EQ(config->defaults.disk_bytes, 512u << 20);
  EXPECT_EQ(config->max.memory_bytes, uint64_t{2} << 30);
  EXPECT_EQ(config->max.pids, 512);
  EXPECT_EQ(config->max.cpus, 2);
  EXPECT_EQ(config->max.disk_bytes, uint64_t{2} << 30);
  ASSERT_EQ(config->tokens.size(), 2u);
  EXPECT_EQ(config->tokens[1].name, "ops");
  EXPECT_EQ(config->tokens[1].file, "/etc/flashroll/ops.token");
  EXPECT_EQ(config->tokens[0].scopes, (std::vector<std::string>{"create", "exec", "files"}));
  EXPECT_EQ(config->tls_cert, "/etc/flashroll/cert.pem");
  EXPECT_EQ(config->tls_key, "/etc/flashroll/key.pem");
}

TEST(SandboxdConfigTest, AMinimalConfigHasTheBareDefaults) {
  auto config = Parse(kMinimal);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->listen, "127.0.0.1:7070");
  EXPECT_EQ(config->image_store, kImageStoreDir);
  EXPECT_TRUE(config->images.empty());
  EXPECT_TRUE(config->workspace_root.empty());
  EXPECT_TRUE(config->seccomp_profiles.empty());
  EXPECT_EQ(config->defaults.memory_bytes, NodePolicy().defaults.memory_bytes);
  EXPECT_EQ(config->max.pids, NodePolicy().max.pids);
  EXPECT_TRUE(config->tls_cert.empty());
  EXPECT_FALSE(config->keep_sandboxes);
  EXPECT_EQ(config->orphan_timeout, std::chrono::hours(1));
}

TEST(SandboxdConfigTest, ErrorsNameFileLineAndKey) {
  ExpectError("kind: sandboxd\n", "node.yaml:1: tokens: missing required key");
  ExpectError(std::string(kMinimal) + "imagez: [x]\n", "node.yaml:4: imagez: unknown key");
  ExpectError("kind: sandboxd\ntokens:\n  - {name: a, file: /t, scopes: [root]}\n",
              "node.yaml:3: tokens[0].scopes[0]");
  ExpectError("kind: sandboxd\ntokens:\n  - {name: a, file: /t, scopes: []}\n", "tokens[0].scopes");
  ExpectError("kind: sandboxd\ntokens:\n  - {name: a, file: /t, scopes: [create, image:../etc]}\n",
              "node.yaml:3: tokens[0].scopes[1]: scope \"image:../etc\": image name '../etc'");
  ExpectError("kind: sandboxd\ntokens:\n  - {name: a, file: /t, scopes: [create, workspace:a/b]}\n",
              "node.yaml:3: tokens[0].scopes[1]: scope \"workspace:a/b\": a workspace is one directory name");
  ExpectError(std::string(kMinimal) + "limits: {max: {cpuset: 3-1}}\n", "limits.max.cpuset: cpuset '3-1'");
  ExpectError(std::string(kMinimal) + "limits: {max: {cpuset: 0-1}, default: {cpuset: 2}}\n",
              "limits.default.cpuset: is above limits.max.cpuset");
  ExpectError(std::string(kMinimal) + "limits: {max: {ttl: 30m}}\n", "limits.default.ttl: is above limits.max.ttl");
  ExpectError(std::string(kMinimal) + "images: [ok, ../etc]\n",
              "node.yaml:4: images[1]: image name '../etc': may hold only letters");
  ExpectError(std::string(kMinimal) + "images: [busybox]\n", "images[0]: image name 'busybox': is a built-in image");
  ExpectError("kind: sandboxd\ntokens:\n  - {name: a, file: /t, scopes: [create]}\n"
              "  - {name: a, file: /u, scopes: [exec]}\n",
              "node.yaml:4: tokens[1].name: \"a\" is also tokens[0]'s name");
  ExpectError(std::string(kMinimal) + "workspace_root: srv/ws\n",
              "node.yaml:4: workspace_root: must be an absolute path");
  ExpectError(std::string(kMinimal) + "keep_sandboxes: maybe\n", "keep_sandboxes");
  ExpectError(std::string(kMinimal) + "orphan_timeout: soon\n", "orphan_timeout");
  ExpectError(std::string(kMinimal) + "workspace_images: images\n", "workspace_images: must be an absolute path");
  ExpectError(std::string(kMinimal) + "workspace_disks: sometimes\n", "workspace_disks");
  ExpectError(std::string(kMinimal) + "max_workspaces: -1\n", "max_workspaces");
  ExpectError(std::string(kMinimal) + "seccomp_profiles: profiles\n", "seccomp_profiles: must be an absolute path");
  ExpectError(std::string(kMinimal) + "image_store: store\n", "image_store: must be an absolute path");
  ExpectError(std::string(kMinimal) + "tls: {cert: /c}\n", "tls.key: missing required key");
}

TEST(SandboxdConfigTest, DefaultsMayNotExceedTheMaximums) {
  ExpectError(std::string(kMinimal) + "limits:\n  default: {memory: 8G}\n",
              "node.yaml:5: limits.default.memory: is above limits.max.memory");
  ExpectError(std::string(kMinimal) + "limits:\n  max: {pids: 100}\n", "limits.default.pids: is above limits.max.pids");
  ExpectError(std::string(kMinimal) + "limits:\n  default: {cpus: 8}\n", "limits.default.cpus");
  ExpectError(std::string(kMinimal) + "limits:\n  max: {disk: 100M}\n", "limits.default.disk");
  EXPECT_TRUE(Parse(std::string(kMinimal) + "limits:\n  default: {memory: 4G, pids: 4096, cpus: 4, disk: 4G}\n").ok());
  // A pid limit of 0 would let no process start: the smallest is 1.
  ExpectError(std::string(kMinimal) + "limits:\n  default: {pids: 0}\n", "limits.default.pids");
  EXPECT_TRUE(Parse(std::string(kMinimal) + "limits:\n  default: {pids: 1}\n").ok());
}

TEST(SandboxdConfigTest, ExecLimitsAreReadAndDefaultsMayNotExceedThem) {
  auto config = Parse(std::string(kMinimal) +
                      "exec:\n  timeout: {default: 30s, max: 5m}\n  max_output: {default: 1M, max: 4M}\n");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->exec.default_timeout, std::chrono::seconds(30));
  EXPECT_EQ(config->exec.max_timeout, std::chrono::minutes(5));
  EXPECT_EQ(config->exec.default_output_bytes, size_t{1} << 20);
  EXPECT_EQ(config->exec.max_output_bytes, size_t{4} << 20);
  ExpectError(std::string(kMinimal) + "exec:\n  timeout: {max: 1m}\n",
              "exec.timeout.default: is above exec.timeout.max");
  ExpectError(std::string(kMinimal) + "exec:\n  max_output: {max: 1M}\n",
              "exec.max_output.default: is above exec.max_output.max");
  ExpectError(std::string(kMinimal) + "exec:\n  max_output: {max: 2G}\n", "exec.max_output.max");
}

TEST(SandboxdConfigTest, OnlyLoopbackListensWithoutTls) {
  SandboxdConfig config;
  for (const char* listen : {"127.0.0.1:7070", "127.8.9.10:1", "localhost:7070", "[::1]:7070", "::1:7070"}) {
    config.listen = listen;
    EXPECT_TRUE(CheckTransport(config, false).ok()) << listen;
  }
  for (const char* listen : {"0.0.0.0:7070", "10.0.0.5:7070", "128.0.0.1:7070", "[::]:7070", "example.com:7070"}) {
    config.listen = listen;
    const Status status = CheckTransport(config, false);
    EXPECT_EQ(status.code(), Code::kInvalidArgument) << listen;
    EXPECT_NE(status.message().find("needs tls"), std::string::npos) << status.ToString();
    EXPECT_TRUE(CheckTransport(config, /*insecure=*/true).ok()) << listen;
  }
  config.listen = "0.0.0.0:7070";
  config.tls_cert = "/c.pem";
  config.tls_key = "/k.pem";
  EXPECT_TRUE(CheckTransport(config, false).ok());
}

class SandboxdLoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/flashroll-sandboxd-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
    config_.image_store = dir_ + "/store";
    config_.workspace_images = dir_ + "/images";  // not the host's default
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path) << text;
    ::chmod(path.c_str(), 0600);
    return path;
  }

  std::string dir_;
  SandboxdConfig config_;
};

TEST_F(SandboxdLoadTest, ImagesMustBeInTheStore) {
  fs::create_directories(dir_ + "/store/python/bin");
  config_.images = {"python"};
  auto policy = LoadNodePolicy(config_);
  ASSERT_TRUE(policy.ok()) << policy.status().ToString();
  EXPECT_EQ(policy->images.at("python").tree, dir_ + "/store/python");
  config_.images = {"python", "node"};
  policy = LoadNodePolicy(config_);
  EXPECT_EQ(policy.status().code(), Code::kNotFound);
  EXPECT_NE(policy.status().message().find("images[1]: no image 'node' in the image store"), std::string::npos)
      << policy.status().ToString();
}

TEST_F(SandboxdLoadTest, TheWorkspaceRootIsCanonicalAndNeverTheHostRoot) {
  fs::create_directories(dir_ + "/real/ws");
  fs::create_directory_symlink(dir_ + "/real/ws", dir_ + "/link");
  config_.workspace_root = dir_ + "/link";
  auto policy = LoadNodePolicy(config_);
  ASSERT_TRUE(policy.ok()) << policy.status().ToString();
  EXPECT_EQ(policy->workspace_root, dir_ + "/real/ws");
  config_.workspace_root = dir_ + "/real/../../..";
  EXPECT_NE(LoadNodePolicy(config_).status().message().find("is the host's root"), std::string::npos);
  config_.workspace_root = "/";
  EXPECT_EQ(LoadNodePolicy(config_).status().code(), Code::kInvalidArgument);
  config_.workspace_root = Write("file", "x");
  EXPECT_NE(LoadNodePolicy(config_).status().message().find("is not a directory"), std::string::npos);
  config_.workspace_root = dir_ + "/missing";
  EXPECT_NE(LoadNodePolicy(config_).status().message().find("workspace_root: realpath"), std::string::npos);
}

// With a workspace root, rw paths are bounded by workspace disks unless the
// config says workspace_disks: false; without one there are none to make.
TEST_F(SandboxdLoadTest, AWorkspaceRootHasWorkspaceDisksUnlessTurnedOff) {
  if (::geteuid() != 0) GTEST_SKIP() << "workspace disks need root";
  auto bare = LoadNodePolicy(config_);
  ASSERT_TRUE(bare.ok()) << bare.status().ToString();
  EXPECT_EQ(bare->workspace_disks, nullptr);
  fs::create_directories(dir_ + "/ws");
  config_.workspace_root = dir_ + "/ws";
  config_.max_workspaces = 3;
  auto disks = LoadNodePolicy(config_);
  ASSERT_TRUE(disks.ok()) << disks.status().ToString();
  ASSERT_NE(disks->workspace_disks, nullptr);
  EXPECT_EQ(disks->workspace_disks->root(), dir_ + "/ws");
  EXPECT_EQ(disks->max_workspaces, 3u);
  EXPECT_TRUE(fs::is_directory(dir_ + "/images"));
  config_.workspace_disks = false;
  auto plain = LoadNodePolicy(config_);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->workspace_disks, nullptr);
}

TEST_F(SandboxdLoadTest, SeccompProfilesAreTheDirectorysJsonFilesCompiled) {
  Write("seccomp/strict.json", R"({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"],
      "action": "SCMP_ACT_ALLOW"}]})");
  Write("seccomp/default.json", R"({"syscalls": []})");
  Write("seccomp/notes.txt", "not a profile");
  Write("seccomp/.json", "{}");  // no name
  config_.seccomp_profiles = dir_ + "/seccomp";
  auto policy = LoadNodePolicy(config_);
  ASSERT_TRUE(policy.ok()) << policy.status().ToString();
  ASSERT_EQ(policy->seccomp_profiles.size(), 1u);  // default.json never shadows the built-in
  EXPECT_EQ(policy->seccomp_profiles.at("strict"), dir_ + "/seccomp/strict.json");

  Write("seccomp/broken.json", R"({"syscalls": [{"names": ["frobnicate"], "action": "SCMP_ACT_ALLOW"}]})");
  policy = LoadNodePolicy(config_);
  EXPECT_EQ(policy.status().code(), Code::kInvalidArgument);
  EXPECT_NE(policy.status().message().find("seccomp_profiles: " + dir_ + "/seccomp/broken.json"), std::string::npos)
      << policy.status().ToString();
}

TEST_F(SandboxdLoadTest, TokensComeFromTheirFilesAndMustDiffer) {
  config_.tokens = {{"runner", Write("runner.token", "runner-secret\n"), {"create", "exec"}},
                    {"ops", Write("ops.token", "ops-secret"), {"admin"}}};
  auto credentials = LoadCredentials(config_);
  ASSERT_TRUE(credentials.ok()) << credentials.status().ToString();
  ASSERT_EQ(credentials->size(), 2u);
  EXPECT_EQ((*credentials)[0].name, "runner");
  EXPECT_EQ((*credentials)[0].token, "runner-secret");
  EXPECT_EQ((*credentials)[0].scopes, (std::vector<std::string>{"create", "exec"}));

  config_.tokens.push_back({"copy", Write("copy.token", "runner-secret"), {"admin"}});
  credentials = LoadCredentials(config_);
  EXPECT_EQ(credentials.status().code(), Code::kInvalidArgument);
  EXPECT_NE(credentials.status().message().find("tokens[2].file: " + dir_ +
                                                "/copy.token holds the same token as tokens[0].file"),
            std::string::npos)
      << credentials.status().ToString();
  config_.tokens = {{"gone", dir_ + "/none.token", {"exec"}}};
  EXPECT_NE(LoadCredentials(config_).status().message().find("tokens[0].file"), std::string::npos);
}

}  // namespace
}  // namespace flashroll::sandbox::api
