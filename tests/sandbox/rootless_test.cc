// Without root the manager falls back to user namespaces without resource
// limits, and refuses a spec with limits unless told to run without them. Run as `nobody` in a forked child; skipped when the kernel does
// not let unprivileged users create user namespaces.
#include <gtest/gtest.h>
#include <grp.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "sandbox/held_path.h"
#include "tests/sandbox/sandbox_fixture.h"

namespace flashroll::sandbox {
namespace {

constexpr int kSkip = 77;
constexpr uid_t kNobody = 65534;

// Runs `body` as nobody in a child process; returns its exit code and what
// it wrote to `out` (a pipe).
int AsNobody(const std::function<int(int out)>& body, std::string* output) {
  int pipefd[2];
  if (pipe(pipefd) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    close(pipefd[0]);
    if (setgroups(0, nullptr) != 0 || setgid(kNobody) != 0 || setuid(kNobody) != 0) _exit(3);
    // setuid left the process non-dumpable, which makes its (and its
    // children's) /proc files root's; a user's own process is dumpable.
    prctl(PR_SET_DUMPABLE, 1);
    // Can this user create a user namespace at all? Try in a throwaway child.
    const pid_t probe = fork();
    if (probe == 0) _exit(unshare(CLONE_NEWUSER) == 0 ? 0 : 1);
    int status = 0;
    waitpid(probe, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) _exit(kSkip);
    _exit(body(pipefd[1]));
  }
  close(pipefd[1]);
  char buf[4096];
  ssize_t n;
  while ((n = read(pipefd[0], buf, sizeof(buf))) > 0) output->append(buf, static_cast<size_t>(n));
  close(pipefd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void Say(int fd, const std::string& text) { (void)!write(fd, text.data(), text.size()); }

TEST(SandboxRootlessTest, NobodyGetsAUserNamespaceSandboxWithoutLimitsOnlyWhenAllowed) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to become nobody";
  std::string output;
  const int rc = AsNobody(
      [](int out) {
        // A limit it cannot enforce is refused, naming the field...
        auto strict = Manager::Open();
        if (!strict.ok()) {
          Say(out, "open: " + strict.status().ToString());
          return 1;
        }
        for (int field = 0; field < 4; ++field) {
          SandboxSpec limited;
          if (field == 0) limited.memory_bytes = 64 << 20;
          if (field == 1) limited.pids = 10;
          if (field == 2) limited.cpus = 0.5;
          if (field == 3) limited.cpuset = "0";
          auto refused = (*strict)->Create(limited);
          Say(out, refused.ok() ? "accepted\n" : refused.status().message().substr(0, refused.status().message().find(':')) + " refused\n");
        }
        strict->reset();
        // ... unless the manager is told to run without them.
        Manager::Options options;
        options.allow_unenforced_limits = true;
        auto manager = Manager::Open(options);
        if (!manager.ok()) {
          Say(out, "open: " + manager.status().ToString());
          return 1;
        }
        Say(out, std::string("layout=") + (*manager)->cgroup_layout() + "\n");
        SandboxSpec spec;
        spec.memory_bytes = 64 << 20;  // accepted, not applied
        auto id = (*manager)->Create(spec);
        if (!id.ok()) {
          Say(out, "create: " + id.status().ToString());
          return 1;
        }
        ExecRequest request;
        request.argv = {"/bin/sh", "-c",
                        "id -u; hostname; cat /proc/self/uid_map | tr -s ' '; echo x > /tmp/f && cat /tmp/f; "
                        "echo hi > /dev/null && echo null-ok; (echo x > /escape) 2>/dev/null || echo no-escape"};
        auto r = (*manager)->Exec(*id, request);
        if (!r.ok()) {
          Say(out, "exec: " + r.status().ToString());
          return 1;
        }
        Say(out, r->stdout_data + r->stderr_data);
        // The files API joins the sandbox's user namespace too.
        if (Status put = (*manager)->PutFile(*id, "/tmp/put", "from-api\n"); !put.ok()) {
          Say(out, "put: " + put.ToString());
          return 1;
        }
        request.argv = {"/bin/sh", "-c", "stat -c %u:%g /tmp/put; cat /tmp/put"};
        auto seen = (*manager)->Exec(*id, request);
        Say(out, seen.ok() ? seen->stdout_data + seen->stderr_data : "exec: " + seen.status().ToString());
        auto hostname = (*manager)->GetFile(*id, "/proc/sys/kernel/hostname");
        Say(out, "get=" + (hostname.ok() ? *hostname : hostname.status().ToString() + "\n"));
        Say(out, "freeze=" + std::string((*manager)->Freeze(*id).ok() ? "ok" : "refused") + "\n");
        SandboxSpec policy;
        policy.net = NetMode::kPolicy;
        Say(out, "policy=" + std::string((*manager)->Create(policy).ok() ? "ok" : "refused") + "\n");
        if (Status s = (*manager)->Destroy(*id); !s.ok()) {
          Say(out, "destroy: " + s.ToString());
          return 1;
        }
        return 0;
      },
      &output);
  if (rc == kSkip) GTEST_SKIP() << "the kernel forbids unprivileged user namespaces";
  ASSERT_EQ(rc, 0) << output;
  EXPECT_EQ(output,
            "memory refused\npids refused\ncpus refused\ncpuset refused\n"
            "layout=none\n"
            "0\n"
            "sandbox\n"
            " 0 65534 1\n"
            "x\n"
            "null-ok\n"
            "no-escape\n"
            "0:0\n"
            "from-api\n"
            "get=sandbox\n"
            "freeze=refused\n"
            "policy=refused\n");
}

// A rootless manager may not clone a mount tree, so its child reopens an rw
// path in its own mount namespace (following no symlink) and binds it only
// when it is the inode the manager held: a directory replaced after the
// check fails the create instead of binding the replacement. The reopen is
// O_PATH: a FIFO is bound too, where a plain open would wait for a writer.
TEST(SandboxRootlessTest, AnRwPathReplacedAfterTheCheckIsNotBound) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to become nobody";
  char dir[] = "/tmp/flashroll-rootless-rw-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string base = dir;
  const std::string work = base + "/work";
  // Writable but not listable by its owner: binding needs no read access.
  ASSERT_EQ(mkdir(work.c_str(), 0300), 0);
  ASSERT_EQ(chown(base.c_str(), kNobody, kNobody), 0);
  ASSERT_EQ(chown(work.c_str(), kNobody, kNobody), 0);
  std::string output;
  const int rc = AsNobody(
      [&](int out) {
        Manager::Options options;
        options.allow_unenforced_limits = true;
        auto manager = Manager::Open(options);
        if (!manager.ok()) {
          Say(out, "open: " + manager.status().ToString());
          return 1;
        }
        SandboxSpec spec;
        spec.rw_paths = {work};
        auto id = (*manager)->Create(spec);
        if (!id.ok()) {
          Say(out, "create: " + id.status().ToString());
          return 1;
        }
        ExecRequest request;
        request.argv = {"/bin/sh", "-c", "echo inside > " + work + "/marker && echo bound"};
        auto r = (*manager)->Exec(*id, request);
        Say(out, r.ok() ? r->stdout_data + r->stderr_data : "exec: " + r.status().ToString());
        (void)(*manager)->Destroy(*id);
        auto held = HoldHostPath(work);
        if (!held.ok()) {
          Say(out, "hold: " + held.status().ToString());
          return 1;
        }
        if (rename(work.c_str(), (base + "/checked").c_str()) != 0 || mkdir(work.c_str(), 0755) != 0) return 2;
        spec.rw_held = {*held};
        auto replaced = (*manager)->Create(spec);
        Say(out, replaced.ok() ? "bound the replacement\n"
                 : replaced.status().message().find("not the checked inode") != std::string::npos
                     ? "refused\n"
                     : "create: " + replaced.status().ToString() + "\n");
        if (replaced.ok()) (void)(*manager)->Destroy(*replaced);
        // A FIFO as the rw path: reopened O_PATH it is bound at once; a
        // plain open would wait for a writer for ever.
        const std::string fifo = base + "/pipe";
        if (mkfifo(fifo.c_str(), 0600) != 0) return 4;
        SandboxSpec piped;
        piped.rw_paths = {fifo};
        auto with_fifo = (*manager)->Create(piped);
        Say(out, with_fifo.ok() ? "fifo bound\n" : "fifo: " + with_fifo.status().ToString() + "\n");
        if (with_fifo.ok()) (void)(*manager)->Destroy(*with_fifo);
        return 0;
      },
      &output);
  std::filesystem::remove_all(base);
  if (rc == kSkip) GTEST_SKIP() << "the kernel forbids unprivileged user namespaces";
  ASSERT_EQ(rc, 0) << output;
  EXPECT_EQ(output, "bound\nrefused\nfifo bound\n");
}

}  // namespace
}  // namespace flashroll::sandbox
