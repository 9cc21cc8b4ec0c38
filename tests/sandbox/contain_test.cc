// The launch sequence applies Landlock: the overlay root would let a
// sandbox create files anywhere; Landlock confines writes to the writable
// trees.
#include "sandbox/contain.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

// The second fence where the first is missing: the host image's rules
// applied in a forked child on the host itself, where /usr is writable
// (root's own) and no read-only bind stands in the way. Landlock alone
// must refuse a file in /usr (and in /usr/bin reached through the /bin
// symlink) and a new top-level entry, and still let /tmp be written.
TEST(DefaultLandlockRulesTest, TheHostsReadOnlyTreesAreNotWritableEvenWithoutTheirMount) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (the host image's plan; a root-owned /usr to write)";
  auto mounts = PrepareMountsParentSide(SandboxSpec());
  ASSERT_TRUE(mounts.ok()) << mounts.status().ToString();
  const LandlockRules rules = DefaultLandlockRules(SandboxSpec(), *mounts);
  const std::string probe = "flashroll-landlock-probe-" + std::to_string(getpid());
  const std::vector<std::string> paths = {"/usr/lib/" + probe, "/bin/" + probe, "/" + probe, "/tmp/" + probe};
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    close(pipefd[0]);
    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    if (Status applied = ApplyLandlock(rules); !applied.ok()) {
      const std::string text = applied.ToString();
      (void)!write(pipefd[1], text.data(), text.size());
      _exit(2);
    }
    std::string report;
    for (const auto& path : paths) {
      const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      report += fd >= 0 ? "created\n" : std::string(strerrorname_np(errno)) + "\n";
      if (fd >= 0) close(fd);
    }
    (void)!write(pipefd[1], report.data(), report.size());
    _exit(0);
  }
  close(pipefd[1]);
  std::string report;
  char buf[256];
  for (ssize_t n; (n = read(pipefd[0], buf, sizeof(buf))) > 0;) report.append(buf, static_cast<size_t>(n));
  close(pipefd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  for (const auto& path : paths) unlink(path.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << ": " << report;
  EXPECT_EQ(report, "EACCES\nEACCES\nEACCES\ncreated\n");
}

}  // namespace
}  // namespace flashroll::sandbox
