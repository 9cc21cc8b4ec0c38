#include "sandbox/landlock.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>

namespace flashroll::sandbox {
namespace {

// Landlock UAPI bit values the plan is checked against (include/uapi/linux/landlock.h).
constexpr uint64_t kFsTruncate = 1ull << 14;
constexpr uint64_t kFsIoctlDev = 1ull << 15;
constexpr uint64_t kNetConnectTcp = 1ull << 1;
constexpr uint64_t kScopeSignal = 1ull << 1;

// Runs `body` in a forked child (Landlock restricts the caller for good) and
// returns what it reports: "" when every check passed, otherwise the first
// failed check.
std::string InChild(const std::function<std::string()>& body) {
  int fds[2];
  if (pipe(fds) != 0) return std::string("pipe: ") + std::strerror(errno);
  pid_t pid = fork();
  if (pid < 0) return std::string("fork: ") + std::strerror(errno);
  if (pid == 0) {
    close(fds[0]);
    std::string report = body();
    if (!report.empty() && write(fds[1], report.data(), report.size()) < 0) _exit(2);
    _exit(0);
  }
  close(fds[1]);
  std::string report;
  char buf[512];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) report.append(buf, n);
  close(fds[0]);
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    report += " (child status " + std::to_string(wstatus) + ")";
  }
  return report;
}

// Sets no_new_privs and applies `rules`; returns "" or the failure.
std::string Restrict(const LandlockRules& rules) {
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return "prctl(PR_SET_NO_NEW_PRIVS) failed";
  Status status = ApplyLandlock(rules);
  return status.ok() ? "" : "ApplyLandlock: " + status.ToString();
}

// Returns "" if `result` is -1 with errno `expected`, else a description.
std::string ExpectErrno(const char* what, long result, int expected) {
  if (result == -1 && errno == expected) return "";
  if (result == -1)
    return std::string(what) + ": errno " + std::strerror(errno) + ", want " + std::strerror(expected);
  return std::string(what) + ": succeeded, want " + std::strerror(expected);
}

std::string ExpectOk(const char* what, long result) {
  if (result >= 0) return "";
  return std::string(what) + ": " + std::strerror(errno);
}

// Skips the test unless the kernel's Landlock ABI is at least `abi`.
#define REQUIRE_LANDLOCK_ABI(abi)                                                  \
  do {                                                                             \
    Result<int> have = LandlockAbiVersion();                                       \
    if (!have.ok()) GTEST_SKIP() << have.status().ToString();                      \
    if (*have < (abi)) GTEST_SKIP() << "Landlock ABI " << *have << " < " << (abi); \
  } while (0)

class TempDir {
 public:
  TempDir() {
    std::string templ = (std::filesystem::temp_directory_path() / "fr-landlock-XXXXXX").string();
    path_ = mkdtemp(templ.data()) ? templ : "";
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

int ListenTcp(uint16_t* port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd, 8) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

long ConnectTcp(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  long rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  int err = errno;
  close(fd);
  errno = err;
  return rc;
}

TEST(LandlockTest, PlanNeedsFullAbiUnlessBestEffort) {
  LandlockRules rules;  // restrict_fs by default
  Result<LandlockPlan> plan = PlanLandlock(rules, 3);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(plan.status().message().find("filesystem"), std::string::npos) << plan.status().ToString();

  rules.best_effort_fs = true;
  plan = PlanLandlock(rules, 3);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->abi, 3);
  EXPECT_TRUE(plan->fs_degraded);
  EXPECT_NE(plan->handled_access_fs & kFsTruncate, 0u);
  EXPECT_EQ(plan->handled_access_fs & kFsIoctlDev, 0u);

  plan = PlanLandlock(rules, 7);
  ASSERT_TRUE(plan.ok());
  EXPECT_FALSE(plan->fs_degraded);
  EXPECT_NE(plan->handled_access_fs & kFsIoctlDev, 0u);

  // No Landlock at all: best-effort everywhere is the only way through.
  rules.restrict_tcp_connect = true;
  plan = PlanLandlock(rules, 0);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("TCP"), std::string::npos) << plan.status().ToString();
  rules.best_effort_tcp = true;
  plan = PlanLandlock(rules, 0);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->abi, 0);
  EXPECT_TRUE(plan->fs_degraded && plan->tcp_degraded);

  LandlockRules scope;
  scope.restrict_fs = false;
  scope.scope_signals = true;
  plan = PlanLandlock(scope, 5);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("scoping needs ABI 6"), std::string::npos);
  plan = PlanLandlock(scope, 6);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->scoped, kScopeSignal);
  EXPECT_EQ(plan->handled_access_fs, 0u);

  LandlockRules tcp;
  tcp.restrict_fs = false;
  tcp.restrict_tcp_connect = true;
  plan = PlanLandlock(tcp, 4);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->handled_access_net, kNetConnectTcp);

  LandlockRules nothing;
  nothing.restrict_fs = false;
  plan = PlanLandlock(nothing, 0);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->abi, 0);
}

TEST(LandlockTest, FilesystemReadOnlyAndReadWrite) {
  REQUIRE_LANDLOCK_ABI(5);
  TempDir base;
  ASSERT_FALSE(base.path().empty());
  std::string ro = base.path() + "/ro", rw = base.path() + "/rw";
  ASSERT_EQ(mkdir(ro.c_str(), 0755), 0);
  ASSERT_EQ(mkdir(rw.c_str(), 0755), 0);
  {
    int fd = open((ro + "/data").c_str(), O_WRONLY | O_CREAT, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, "hello", 5), 5);
    close(fd);
  }
  // The launcher's split: plan in the parent, raw syscalls in the child.
  LandlockRules rules;
  rules.read_only_paths = {ro};
  rules.read_write_paths = {rw};
  Result<LandlockPlan> plan = PrepareLandlockParentSide(rules);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  std::string report = InChild([&]() -> std::string {
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return "prctl(PR_SET_NO_NEW_PRIVS) failed";
    ChildStatus child = LandlockChild(rules, *plan);
    if (!child.ok())
      return std::string("LandlockChild: ") + child.call + ": " + std::strerror(child.err);
    std::string r;
    // (a) the read-only tree can be listed and read.
    int fd = open((ro + "/data").c_str(), O_RDONLY);
    char buf[8] = {};
    if (fd < 0 || read(fd, buf, sizeof(buf)) != 5 || std::strncmp(buf, "hello", 5) != 0) {
      return "read ro/data failed: " + std::string(std::strerror(errno));
    }
    close(fd);
    if (!(r = ExpectOk("open ro dir", open(ro.c_str(), O_RDONLY | O_DIRECTORY))).empty()) return r;
    // (b) but not changed.
    if (!(r = ExpectErrno("open ro/data O_WRONLY", open((ro + "/data").c_str(), O_WRONLY), EACCES))
             .empty())
      return r;
    if (!(r = ExpectErrno("truncate ro/data", truncate((ro + "/data").c_str(), 0), EACCES)).empty())
      return r;
    if (!(r = ExpectErrno("create ro/new", open((ro + "/new").c_str(), O_WRONLY | O_CREAT, 0644),
                          EACCES))
             .empty())
      return r;
    if (!(r = ExpectErrno("unlink ro/data", unlink((ro + "/data").c_str()), EACCES)).empty()) return r;
    // The read-write tree takes writes.
    fd = open((rw + "/new").c_str(), O_WRONLY | O_CREAT, 0644);
    if (fd < 0 || write(fd, "x", 1) != 1)
      return "write rw/new failed: " + std::string(std::strerror(errno));
    close(fd);
    if (!(r = ExpectOk("mkdir rw/sub", mkdir((rw + "/sub").c_str(), 0755))).empty()) return r;
    if (!(r = ExpectOk("unlink rw/new", unlink((rw + "/new").c_str()))).empty()) return r;
    // Anything outside both trees is neither readable nor writable.
    if (!(r = ExpectErrno("create outside",
                          open((base.path() + "/outside").c_str(), O_WRONLY | O_CREAT, 0644), EACCES))
             .empty())
      return r;
    if (!(r = ExpectErrno("read /etc/passwd", open("/etc/passwd", O_RDONLY), EACCES)).empty()) return r;
    return "";
  });
  EXPECT_EQ(report, "");
  // The host side is untouched.
  struct stat st;
  EXPECT_EQ(stat((ro + "/data").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 5);
  EXPECT_NE(stat((base.path() + "/outside").c_str(), &st), 0);
}

TEST(LandlockTest, ExecuteNeedsExecutablePath) {
  REQUIRE_LANDLOCK_ABI(5);
  auto run_true = [](bool executable) {
    return InChild([executable]() -> std::string {
      LandlockRules rules;
      (executable ? rules.executable_paths : rules.read_only_paths) = {"/usr", "/lib", "/lib64", "/etc"};
      for (auto* list : {&rules.executable_paths, &rules.read_only_paths}) {
        std::erase_if(*list, [](const std::string& p) { return access(p.c_str(), F_OK) != 0; });
      }
      if (std::string r = Restrict(rules); !r.empty()) return r;
      pid_t pid = fork();
      if (pid == 0) {
        execl("/usr/bin/true", "true", nullptr);
        _exit(errno == EACCES ? 100 : 101);
      }
      int wstatus = 0;
      waitpid(pid, &wstatus, 0);
      return "exit " + std::to_string(WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1);
    });
  };
  EXPECT_EQ(run_true(true), "exit 0");
  EXPECT_EQ(run_true(false), "exit 100");  // execve: EACCES
}

TEST(LandlockTest, TcpConnectAndBindPorts) {
  REQUIRE_LANDLOCK_ABI(4);
  uint16_t allowed = 0, denied = 0;
  int l1 = ListenTcp(&allowed), l2 = ListenTcp(&denied);
  ASSERT_GE(l1, 0);
  ASSERT_GE(l2, 0);
  std::string report = InChild([&]() -> std::string {
    LandlockRules rules;
    rules.restrict_fs = false;
    rules.restrict_tcp_connect = true;
    rules.tcp_connect_ports = {allowed};
    rules.restrict_tcp_bind = true;
    rules.tcp_bind_ports = {};
    if (std::string r = Restrict(rules); !r.empty()) return r;
    std::string r;
    if (!(r = ExpectOk("connect allowed port", ConnectTcp(allowed))).empty()) return r;
    if (!(r = ExpectErrno("connect other port", ConnectTcp(denied), EACCES)).empty()) return r;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(denied == 65535 ? 65534 : denied + 1);
    return ExpectErrno("bind tcp", bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), EACCES);
  });
  EXPECT_EQ(report, "");
  close(l1);
  close(l2);
}

TEST(LandlockTest, SignalScopingBlocksProcessesOutsideTheDomain) {
  REQUIRE_LANDLOCK_ABI(6);
  pid_t victim = fork();
  ASSERT_GE(victim, 0);
  if (victim == 0) {
    pause();
    _exit(0);
  }
  std::string report = InChild([victim]() -> std::string {
    LandlockRules rules;
    rules.restrict_fs = false;
    rules.scope_signals = true;
    if (std::string r = Restrict(rules); !r.empty()) return r;
    if (std::string r = ExpectErrno("kill outside", kill(victim, SIGKILL), EPERM); !r.empty()) return r;
    // A process inside the domain can still be signalled.
    pid_t inner = fork();
    if (inner == 0) {
      pause();
      _exit(0);
    }
    if (kill(inner, SIGKILL) != 0) return std::string("kill inside: ") + std::strerror(errno);
    int wstatus = 0;
    waitpid(inner, &wstatus, 0);
    return WIFSIGNALED(wstatus) ? "" : "inner child was not killed";
  });
  EXPECT_EQ(report, "");
  int wstatus = 0;
  EXPECT_EQ(waitpid(victim, &wstatus, WNOHANG), 0) << "the victim outside the domain died";
  kill(victim, SIGKILL);
  waitpid(victim, &wstatus, 0);
}

TEST(LandlockTest, AbstractUnixSocketScoping) {
  REQUIRE_LANDLOCK_ABI(6);
  int server = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(server, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string name = "flashroll-landlock-test-" + std::to_string(getpid());
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  socklen_t len = offsetof(sockaddr_un, sun_path) + 1 + name.size();
  ASSERT_EQ(bind(server, reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(listen(server, 4), 0);
  auto try_connect = [&](bool scoped) {
    return InChild([&, scoped]() -> std::string {
      LandlockRules rules;
      rules.restrict_fs = false;
      rules.scope_abstract_unix_sockets = scoped;
      if (std::string r = Restrict(rules); !r.empty()) return r;
      int fd = socket(AF_UNIX, SOCK_STREAM, 0);
      long rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), len);
      return scoped ? ExpectErrno("connect scoped", rc, EPERM) : ExpectOk("connect unscoped", rc);
    });
  };
  EXPECT_EQ(try_connect(false), "");
  EXPECT_EQ(try_connect(true), "");
  close(server);
}

TEST(LandlockTest, MissingPathFailsNamingSyscallAndPath) {
  REQUIRE_LANDLOCK_ABI(1);
  std::string report = InChild([]() -> std::string {
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return "prctl failed";
    LandlockRules rules;
    rules.best_effort_fs = true;
    rules.read_only_paths = {"/nonexistent/flashroll"};
    Status status = ApplyLandlock(rules);
    return status.ToString();
  });
  EXPECT_EQ(report,
            "not_found: landlock: open(O_PATH) /nonexistent/flashroll: No such file or directory");
}

TEST(LandlockTest, RequiresNoNewPrivs) {
  REQUIRE_LANDLOCK_ABI(1);
  std::string report = InChild([]() -> std::string {
    LandlockRules rules;
    rules.best_effort_fs = true;
    rules.read_only_paths = {"/"};
    Status status = ApplyLandlock(rules);
    if (status.code() != Code::kFailedPrecondition)
      return "want failed_precondition, got " + status.ToString();
    // The child half refuses too, as the launcher would see it.
    Result<LandlockPlan> plan = PrepareLandlockParentSide(rules);
    if (!plan.ok()) return plan.status().ToString();
    ChildStatus child = LandlockChild(rules, *plan);
    if (child.ok() || child.err != EPERM || std::string(child.call) != "landlock_restrict_self") {
      return "LandlockChild without no_new_privs did not fail with EPERM";
    }
    // Nothing was enforced: the read-only rule would forbid creating a file.
    std::string path = (std::filesystem::temp_directory_path() / "fr-landlock-nnp-XXXXXX").string();
    int fd = mkstemp(path.data());
    if (fd < 0) return std::string("mkstemp: ") + std::strerror(errno);
    close(fd);
    unlink(path.c_str());
    return "";
  });
  EXPECT_EQ(report, "");
}

}  // namespace
}  // namespace flashroll::sandbox
