// The default seccomp profile, installed in a forked child (no root needed).
#include "sandbox/seccomp.h"

#include <gtest/gtest.h>
#include <linux/sched.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace flashroll::sandbox {
namespace {

// Runs `probe` in a child under the default profile; returns its exit code.
int RunFiltered(int (*probe)()) {
  auto program = DefaultSeccompProgram();
  EXPECT_TRUE(program.ok()) << program.status().ToString();
  if (!program.ok()) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(100);
    if (!SeccompChild(**program).ok()) _exit(101);
    _exit(probe());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 200 + WTERMSIG(status);
}

TEST(SandboxSeccompTest, CompilesOnce) {
  auto a = DefaultSeccompProgram();
  auto b = DefaultSeccompProgram();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_GT((*a)->instructions.size(), 20u);
}

TEST(SandboxSeccompTest, DeniesNamespaceAndMountCalls) {
  EXPECT_EQ(RunFiltered([] { return unshare(CLONE_NEWUSER) == -1 && errno == EPERM ? 0 : 1; }), 0);
  EXPECT_EQ(RunFiltered([] { return mount("none", "/tmp", "tmpfs", 0, nullptr) == -1 && errno == EPERM ? 0 : 1; }), 0);
  EXPECT_EQ(RunFiltered([] {
              clone_args args {};
              args.exit_signal = SIGCHLD;
              return syscall(SYS_clone3, &args, sizeof(args)) == -1 && errno == ENOSYS ? 0 : 1;
            }),
            0);
  EXPECT_EQ(RunFiltered([] {
              return syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0) == -1 && errno == EPERM ? 0 : 1;
            }),
            0);
  EXPECT_EQ(RunFiltered([] { return socket(AF_VSOCK, SOCK_STREAM, 0) == -1 && errno == EPERM ? 0 : 1; }), 0);
  EXPECT_EQ(RunFiltered([] { return syscall(SYS_bpf, 0, nullptr, 0) == -1 && errno == EPERM ? 0 : 1; }), 0);
}

TEST(SandboxSeccompTest, AllowsOrdinaryWork) {
  EXPECT_EQ(RunFiltered([] {
              const pid_t child = fork();  // plain clone without namespace flags
              if (child == 0) _exit(7);
              int status = 0;
              if (child < 0 || waitpid(child, &status, 0) != child) return 1;
              const int s = socket(AF_INET, SOCK_STREAM, 0);
              if (s < 0) return 2;
              close(s);
              return WEXITSTATUS(status) == 7 ? 0 : 3;
            }),
            0);
}

}  // namespace
}  // namespace flashroll::sandbox
