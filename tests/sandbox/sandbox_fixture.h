// Shared set-up for sandbox tests that need root: a Manager per test and
// helpers to run a command and look at host state.
#pragma once

#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "sandbox/naming.h"
#include "sandbox/sandbox.h"

namespace flashroll::sandbox {

class SandboxFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "sandbox tests need root";
    auto manager = Manager::Open();
    ASSERT_TRUE(manager.ok()) << manager.status().ToString();
    manager_ = std::move(*manager);
  }

  std::string CreateOrDie(const SandboxSpec& spec = SandboxSpec()) {
    auto id = manager_->Create(spec);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return id.ok() ? *id : std::string();
  }

  ExecResult Run(const std::string& id, std::vector<std::string> argv,
                 std::chrono::milliseconds timeout = std::chrono::milliseconds(30000)) {
    ExecRequest request;
    request.argv = std::move(argv);
    request.timeout = timeout;
    auto result = manager_->Exec(id, request);
    EXPECT_TRUE(result.ok()) << result.status().ToString();
    return result.ok() ? *result : ExecResult{};
  }

  ExecResult Sh(const std::string& id, const std::string& script,
                std::chrono::milliseconds timeout = std::chrono::milliseconds(30000)) {
    return Run(id, {"/bin/sh", "-c", script}, timeout);
  }

  // `script` as `user`/`group` (empty: the sandbox's or image's default)
  // in `cwd` (empty: likewise).
  ExecResult ShAs(const std::string& id, const std::string& user, const std::string& group,
                  const std::string& script, const std::string& cwd = "/") {
    ExecRequest request;
    request.argv = {"/bin/sh", "-c", script};
    request.user = user;
    request.group = group;
    request.cwd = cwd;
    request.timeout = std::chrono::seconds(30);
    auto result = manager_->Exec(id, request);
    EXPECT_TRUE(result.ok()) << result.status().ToString();
    return result.ok() ? *result : ExecResult{};
  }

  std::unique_ptr<Manager> manager_;
};

// Directories under <root>/flashroll whose names start with `prefix`, over
// every hierarchy the sandbox uses.
inline std::vector<std::string> CgroupDirsWithPrefix(const std::string& prefix) {
  std::vector<std::string> found;
  for (const char* base : {"/sys/fs/cgroup/unified/flashroll", "/sys/fs/cgroup/memory/flashroll",
                           "/sys/fs/cgroup/pids/flashroll", "/sys/fs/cgroup/cpu/flashroll",
                           "/sys/fs/cgroup/cpuset/flashroll", "/sys/fs/cgroup/flashroll"}) {
    DIR* d = ::opendir(base);
    if (d == nullptr) continue;
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.rfind(prefix, 0) == 0) found.push_back(std::string(base) + "/" + name);
    }
    ::closedir(d);
  }
  return found;
}

inline std::string ReadHostFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline size_t MountCount() {
  const std::string text = ReadHostFile("/proc/self/mountinfo");
  size_t lines = 0;
  for (char c : text) lines += c == '\n';
  return lines;
}

}  // namespace flashroll::sandbox
