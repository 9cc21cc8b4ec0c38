// The default seccomp profile, installed in a forked child (no root needed).
#include "sandbox/seccomp.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/sched.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace flashroll::sandbox {
namespace {

// lsm_list_modules, not in <sys/syscall.h> here; the number is the same on every architecture.
constexpr long kLsmListModules = 461;

// The errno of a failed call, 0 for success: a probe's exit code.
int ErrnoOf(long rc) { return rc == -1 ? errno : 0; }

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

// Default deny: a call the filter does not list fails with ENOSYS, the
// answer of a kernel without it, so a call that a newer kernel adds is
// refused and libc falls back to an older one.
TEST(SandboxSeccompTest, UnlistedCallsFailWithEnosys) {
  // lsm_list_modules (Linux 6.8) is in no list, and unfiltered this kernel answers it.
  if (ErrnoOf(syscall(kLsmListModules, nullptr, nullptr, 0)) == ENOSYS) GTEST_SKIP() << "no lsm_list_modules";
  EXPECT_EQ(RunFiltered([] { return ErrnoOf(syscall(kLsmListModules, nullptr, nullptr, 0)); }), ENOSYS);
  // Docker grants it only with CAP_SYS_NICE.
  EXPECT_EQ(RunFiltered([] { return ErrnoOf(syscall(SYS_get_mempolicy, nullptr, nullptr, 0, nullptr, 0)); }), ENOSYS);
  // A number no kernel has assigned.
  EXPECT_EQ(RunFiltered([] { return ErrnoOf(syscall(1000)); }), ENOSYS);
}

// Each probe fails harmlessly (bad pointers or flags) should the filter let it through.
TEST(SandboxSeccompTest, DangerousCallsFailWithEperm) {
  EXPECT_EQ(RunFiltered([] { return ErrnoOf(syscall(SYS_kexec_load, 0, 0, nullptr, ~0UL)); }), EPERM);
  EXPECT_EQ(RunFiltered([] { return ErrnoOf(syscall(SYS_init_module, nullptr, 0, nullptr)); }), EPERM);
  EXPECT_EQ(RunFiltered([] { return ErrnoOf(syscall(SYS_keyctl, -1, 0, 0, 0, 0)); }), EPERM);
  EXPECT_EQ(RunFiltered([] { return ErrnoOf(syscall(SYS_ptrace, PTRACE_TRACEME, 0, 0, 0)); }), EPERM);
  EXPECT_EQ(RunFiltered([] { return ErrnoOf(syscall(SYS_perf_event_open, nullptr, 0, -1, -1, 0)); }), EPERM);
  EXPECT_EQ(RunFiltered([] { return ErrnoOf(syscall(SYS_pivot_root, nullptr, nullptr)); }), EPERM);
  EXPECT_EQ(RunFiltered([] { return ErrnoOf(syscall(SYS_umount2, nullptr, 0)); }), EPERM);
  EXPECT_EQ(RunFiltered([] { return ErrnoOf(syscall(SYS_io_uring_setup, 1, nullptr)); }), EPERM);
  EXPECT_EQ(RunFiltered([] {
              char ldt[16];
              return ErrnoOf(syscall(SYS_modify_ldt, 0, ldt, sizeof(ldt)));
            }),
            EPERM);
}

// Terminal injection is denied; the kernel reads only the low 32 bits of the
// request, so high bits do not sneak it past. Every other request, however
// its caller extended it to 64 bits, reaches the kernel.
TEST(SandboxSeccompTest, IoctlDeniesTerminalInjectionOnly) {
  // On /dev/null a request the filter lets through gets ENOTTY, never a character into a terminal.
  EXPECT_EQ(RunFiltered([] {
              char c = 'x';
              return ErrnoOf(ioctl(open("/dev/null", O_RDWR), TIOCSTI, &c));
            }),
            EPERM);
  EXPECT_EQ(RunFiltered([] {
              char c = 'x';
              return ErrnoOf(syscall(SYS_ioctl, open("/dev/null", O_RDWR), (1UL << 32) | TIOCSTI, &c));
            }),
            EPERM);
  EXPECT_EQ(RunFiltered([] {
              char c = 0;
              return ErrnoOf(ioctl(open("/dev/null", O_RDWR), TIOCLINUX, &c));
            }),
            EPERM);
  EXPECT_EQ(RunFiltered([] {
              int fds[2];
              int n = 0;
              return pipe(fds) == 0 ? ErrnoOf(ioctl(fds[0], FIONREAD, &n)) : 100;
            }),
            0);
  // Their neighbours (TIOCGWINSZ, TIOCMBIS) are not caught by the mask.
  EXPECT_EQ(RunFiltered([] {
              int arg = 0;
              return ErrnoOf(ioctl(open("/dev/null", O_RDWR), TIOCSTI ^ 1, &arg));
            }),
            ENOTTY);
  EXPECT_EQ(RunFiltered([] {
              int arg = 0;
              return ErrnoOf(ioctl(open("/dev/null", O_RDWR), TIOCLINUX ^ 1, &arg));
            }),
            ENOTTY);
  // TIOCGPTN has bit 31 set: as a negative int sign-extended, its high half is all ones.
  EXPECT_EQ(RunFiltered([] {
              unsigned int pty = 0;
              const long request = static_cast<int>(TIOCGPTN);
              return ErrnoOf(syscall(SYS_ioctl, open("/dev/null", O_RDWR), request, &pty));
            }),
            ENOTTY);
}

TEST(SandboxSeccompTest, ArgumentConditions) {
  // The Linux personas and the query; ADDR_NO_RANDOMIZE would switch off ASLR.
  EXPECT_EQ(RunFiltered([] { return ErrnoOf(personality(0xffffffff)); }), 0);
  EXPECT_EQ(RunFiltered([] { return ErrnoOf(personality(PER_LINUX32)); }), 0);
  EXPECT_EQ(RunFiltered([] { return ErrnoOf(personality(ADDR_NO_RANDOMIZE)); }), ENOSYS);
  // Unix, IP and netlink sockets; other families are unlisted.
  EXPECT_EQ(RunFiltered([] {
              for (int family : {AF_UNIX, AF_INET, AF_INET6, AF_NETLINK}) {
                const int fd = socket(family, SOCK_DGRAM, 0);
                if (fd < 0) return errno;
                close(fd);
              }
              return 0;
            }),
            0);
  EXPECT_EQ(RunFiltered([] { return ErrnoOf(socket(AF_ALG, SOCK_SEQPACKET, 0)); }), ENOSYS);
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
