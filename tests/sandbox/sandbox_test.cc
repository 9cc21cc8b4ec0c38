// The lifecycle API against the real kernel (root only).
#include "sandbox/sandbox.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "sandbox/image.h"
#include "tests/sandbox/sandbox_fixture.h"

namespace flashroll::sandbox {
namespace {

using std::chrono::milliseconds;

class SandboxTest : public SandboxFixture {};

ExecRequest Argv(std::vector<std::string> argv) {
  ExecRequest request;
  request.argv = std::move(argv);
  return request;
}

TEST_F(SandboxTest, EchoWorks) {
  const std::string id = CreateOrDie();
  ExecResult r = Run(id, {"echo", "hello", "world"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.stdout_data, "hello world\n");
  EXPECT_EQ(r.stderr_data, "");
  EXPECT_TRUE(manager_->Destroy(id).ok());
}

TEST_F(SandboxTest, ExitCodesAndSignals) {
  const std::string id = CreateOrDie();
  EXPECT_EQ(Sh(id, "exit 0").exit_code, 0);
  EXPECT_EQ(Sh(id, "exit 3").exit_code, 3);
  EXPECT_EQ(Sh(id, "exit 255").exit_code, 255);
  ExecResult killed = Sh(id, "kill -TERM $$");
  EXPECT_EQ(killed.signal, SIGTERM);
  EXPECT_EQ(killed.exit_code, 128 + SIGTERM);
  ExecResult missing = Run(id, {"no-such-command-anywhere"});
  EXPECT_EQ(missing.exit_code, 127);
  EXPECT_EQ(missing.start_errno, ENOENT);
  ExecResult err = Sh(id, "echo out; echo err >&2; exit 1");
  EXPECT_EQ(err.stdout_data, "out\n");
  EXPECT_EQ(err.stderr_data, "err\n");
  EXPECT_EQ(err.exit_code, 1);
}

TEST_F(SandboxTest, EnvironmentCwdAndIsolationFacts) {
  const std::string id = CreateOrDie();
  ExecRequest request;
  request.argv = {"/bin/sh", "-c", "pwd; echo $FOO; hostname; echo $$; tr \\\\0 \\\\n < /proc/1/cmdline"};
  request.env = {"FOO=bar", "PATH=/usr/bin:/bin"};
  request.cwd = "/tmp";
  auto r = manager_->Exec(id, request);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stdout_data, "/tmp\nbar\nsandbox\n2\nflashroll-init\n");
}

// Root inside holds only the bounded set (caps_test.cc has the rest); a
// non-root user holds nothing.
TEST_F(SandboxTest, ProcessesRunWithBoundedPrivilegesUnderSeccomp) {
  const std::string id = CreateOrDie();
  ExecResult r = Sh(id, "grep -E '^(CapEff|CapPrm|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status");
  EXPECT_EQ(r.stdout_data,
            "CapPrm:\t00000000200405fb\nCapEff:\t00000000200405fb\nCapBnd:\t00000000200405fb\n"
            "CapAmb:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\n");
  ExecRequest nobody;
  nobody.argv = {"grep", "-E", "^(CapEff|CapPrm):", "/proc/self/status"};
  nobody.user = "nobody";
  auto as_nobody = manager_->Exec(id, nobody);
  ASSERT_TRUE(as_nobody.ok()) << as_nobody.status().ToString();
  EXPECT_EQ(as_nobody->stdout_data, "CapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n");
}

TEST_F(SandboxTest, HostImageRunsPythonAndGit) {
  const std::string id = CreateOrDie();
  ExecResult py = Run(id, {"python3", "-c", "import json, ssl; print(json.dumps({'a': 1}))"});
  EXPECT_EQ(py.exit_code, 0) << py.stderr_data;
  EXPECT_EQ(py.stdout_data, "{\"a\": 1}\n");
  ExecResult git = Sh(id, "cd /tmp && git init -q repo && cd repo && echo x > f && git add f && "
                          "git -c user.name=a -c user.email=a@b commit -qm init && git log --format=%s");
  EXPECT_EQ(git.exit_code, 0) << git.stderr_data;
  EXPECT_EQ(git.stdout_data, "init\n");
}

// The host image's /etc is a cached copy of the allowlisted entries: secrets
// stay out, and a change on the host is seen by the next sandbox.
TEST_F(SandboxTest, HostImageEtcIsACurrentCopyWithoutSecrets) {
  const std::string id = CreateOrDie();
  // /etc/shadow is the image's own, every account locked (for PAM): no
  // password field but "*".
  EXPECT_EQ(Sh(id, "cat /etc/hostname 2>/dev/null; cut -d: -f2 /etc/shadow | sort -u; "
                   "ls /etc/ssl/private 2>&1 >/dev/null | wc -l; test -s /etc/ssl/certs/ca-certificates.crt && echo certs")
                .stdout_data,
            "*\n1\ncerts\n");
  auto before = ResolveImage(SandboxSpec());
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  struct stat st {};
  ASSERT_EQ(::stat("/etc/hosts", &st), 0);
  // A new modification time on the host's /etc/hosts (restored after) is a
  // change: a new tree is built with the host's contents.
  const struct timespec touched[2] = {st.st_atim, {st.st_mtim.tv_sec + 1, st.st_mtim.tv_nsec}};
  ASSERT_EQ(::utimensat(AT_FDCWD, "/etc/hosts", touched, 0), 0);
  auto after = ResolveImage(SandboxSpec());
  const struct timespec restored[2] = {st.st_atim, st.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, "/etc/hosts", restored, 0), 0);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_NE(after->lower, before->lower);
  EXPECT_EQ(Sh(id, "true").exit_code, 0);  // a sandbox on the older tree still works
  const std::string other = CreateOrDie();
  EXPECT_EQ(Sh(other, "cat /etc/hosts").stdout_data, ReadHostFile("/etc/hosts"));
}

TEST_F(SandboxTest, BusyboxImage) {
  SandboxSpec spec;
  spec.image = ImageKind::kBusybox;
  const std::string id = CreateOrDie(spec);
  ExecResult r = Sh(id, "echo hi | tr a-z A-Z; test -e /usr/bin/python3 && echo has-python || echo no-python");
  EXPECT_EQ(r.exit_code, 0) << r.stderr_data;
  EXPECT_EQ(r.stdout_data, "HI\nno-python\n");
}

TEST_F(SandboxTest, TimeoutKillsTheCommand) {
  const std::string id = CreateOrDie();
  const auto start = std::chrono::steady_clock::now();
  ExecResult r = Sh(id, "echo started; sleep 30", milliseconds(300));
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.stdout_data, "started\n");
  EXPECT_LT(elapsed, std::chrono::seconds(5));
  // The sandbox is still usable afterwards.
  EXPECT_EQ(Run(id, {"true"}).exit_code, 0);
}

TEST_F(SandboxTest, MemoryBombIsKilledAndReported) {
  SandboxSpec spec;
  spec.memory_bytes = 64 << 20;
  const std::string id = CreateOrDie(spec);
  ExecResult r = Run(id, {"python3", "-c", "b = b'x' * (512 << 20); print('survived')"});
  EXPECT_TRUE(r.oom_killed);
  EXPECT_EQ(r.exit_code, 137);
  EXPECT_EQ(r.stdout_data, "");
  auto info = manager_->Info(id);
  ASSERT_TRUE(info.ok());
  EXPECT_GE(info->oom_kills, 1u);
  // Within the limit, the same sandbox works.
  ExecResult small = Run(id, {"python3", "-c", "b = b'x' * (8 << 20); print(len(b))"});
  EXPECT_FALSE(small.oom_killed);
  EXPECT_EQ(small.stdout_data, "8388608\n");
}

TEST_F(SandboxTest, ForkBombIsContainedByPids) {
  SandboxSpec spec;
  spec.pids = 32;
  const std::string id = CreateOrDie(spec);
  ExecResult r = Run(id, {"python3", "-c",
                          "import os, time\n"
                          "n = 0\n"
                          "for i in range(200):\n"
                          "    try:\n"
                          "        if os.fork() == 0:\n"
                          "            time.sleep(30)\n"
                          "            os._exit(0)\n"
                          "        n += 1\n"
                          "    except OSError:\n"
                          "        break\n"
                          "print(n)\n"});
  ASSERT_EQ(r.exit_code, 0) << r.stderr_data;
  const int forked = std::stoi(r.stdout_data);
  EXPECT_GT(forked, 5);
  EXPECT_LT(forked, 32);
  // A real fork bomb runs into the limit and the timeout; the host is fine.
  ExecResult bomb = Run(id, {"bash", "-c", "b() { b | b & }; b"}, milliseconds(1500));
  EXPECT_TRUE(bomb.timed_out || bomb.exit_code != 0);
  EXPECT_TRUE(manager_->Destroy(id).ok());
}

TEST_F(SandboxTest, CpuQuotaIsApplied) {
  SandboxSpec spec;
  spec.cpus = 0.2;
  const std::string id = CreateOrDie(spec);
  const std::string quota = ReadHostFile("/sys/fs/cgroup/cpu/flashroll/" + id + "/cpu.cfs_quota_us");
  if (quota.empty()) GTEST_SKIP() << "not the hybrid layout";
  EXPECT_EQ(quota, "20000\n");
  // Busy for 1 s of wall time: with 0.2 CPUs it gets about 0.2 s of CPU.
  ExecResult r = Run(id, {"python3", "-c",
                          "import time\n"
                          "end = time.time() + 1.0\n"
                          "while time.time() < end: pass\n"
                          "print(time.process_time())\n"});
  ASSERT_EQ(r.exit_code, 0) << r.stderr_data;
  EXPECT_LT(std::stod(r.stdout_data), 0.5);
}

TEST_F(SandboxTest, PutAndGetFiles) {
  const std::string id = CreateOrDie();
  ASSERT_TRUE(manager_->PutFile(id, "/tmp/in.txt", "payload\n").ok());
  ExecResult r = Sh(id, "cat /tmp/in.txt; echo result > /root/out.txt");
  EXPECT_EQ(r.stdout_data, "payload\n");
  auto out = manager_->GetFile(id, "/root/out.txt");
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, "result\n");
  // Read-only layers stay read-only, and symlinks cannot lead out of the sandbox.
  EXPECT_FALSE(manager_->PutFile(id, "/usr/bin/evil", "x").ok());
  Sh(id, "ln -s /etc/hostname /tmp/link; ln -s ../../../../../etc /tmp/up");
  auto through_link = manager_->GetFile(id, "/tmp/link");
  EXPECT_FALSE(through_link.ok());
  // ".." stops at the sandbox's root: the file lands in the sandbox's /etc.
  EXPECT_TRUE(manager_->PutFile(id, "/tmp/up/flashroll-escape", "x").ok());
  EXPECT_NE(access("/etc/flashroll-escape", F_OK), 0);
  EXPECT_EQ(Sh(id, "cat /etc/flashroll-escape").stdout_data, "x");
  EXPECT_EQ(manager_->GetFile(id, "/no/such/file").status().code(), Code::kNotFound);
}

TEST_F(SandboxTest, FreezeThawAndDestroyFromFrozen) {
  const std::string id = CreateOrDie();
  ASSERT_TRUE(manager_->Freeze(id).ok());
  EXPECT_EQ(manager_->Info(id)->state, State::kFrozen);
  EXPECT_EQ(manager_->Exec(id, Argv({"true"})).status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(manager_->Freeze(id).code(), Code::kFailedPrecondition);
  ASSERT_TRUE(manager_->Thaw(id).ok());
  EXPECT_EQ(Run(id, {"true"}).exit_code, 0);
  ASSERT_TRUE(manager_->Freeze(id).ok());
  EXPECT_TRUE(manager_->Destroy(id).ok());
  EXPECT_EQ(manager_->Destroy(id).code(), Code::kNotFound);
  EXPECT_EQ(manager_->Info(id).status().code(), Code::kNotFound);
  EXPECT_TRUE(CgroupDirsWithPrefix(id).empty());
}

TEST_F(SandboxTest, DestroyWhileExecRunning) {
  const std::string id = CreateOrDie();
  std::thread killer([&] {
    std::this_thread::sleep_for(milliseconds(200));
    EXPECT_TRUE(manager_->Destroy(id).ok());
  });
  auto r = manager_->Exec(id, Argv({"sleep", "30"}));
  killer.join();
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_TRUE(CgroupDirsWithPrefix(id).empty());
}

TEST_F(SandboxTest, TtlDestroysTheSandbox) {
  SandboxSpec spec;
  spec.ttl = milliseconds(200);
  const std::string id = CreateOrDie(spec);
  EXPECT_EQ(Run(id, {"true"}).exit_code, 0);
  for (int i = 0; i < 100 && manager_->Info(id).ok(); ++i) std::this_thread::sleep_for(milliseconds(20));
  EXPECT_EQ(manager_->Info(id).status().code(), Code::kNotFound);
  // Expiry hands the teardown to the reaper: on a loaded machine a first
  // attempt can run out of time and be retried after the sandbox left Info.
  for (int i = 0; i < 500 && !CgroupDirsWithPrefix(id).empty(); ++i) std::this_thread::sleep_for(milliseconds(20));
  EXPECT_TRUE(CgroupDirsWithPrefix(id).empty());
}

TEST_F(SandboxTest, CreateIsIdempotentWithClientKey) {
  auto a = manager_->Create(SandboxSpec(), "key-1");
  auto b = manager_->Create(SandboxSpec(), "key-1");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(manager_->List().size(), 1u);
  ASSERT_TRUE(manager_->Destroy(*a).ok());
  auto c = manager_->Create(SandboxSpec(), "key-1");
  ASSERT_TRUE(c.ok());
  EXPECT_NE(*c, *a);
}

TEST_F(SandboxTest, NetPolicyRefusesIpv6RulesTheLinkCannotCarry) {
  SandboxSpec spec;
  spec.net = NetMode::kPolicy;
  auto rule = ParseAllowRule("[2001:db8::1]:443");
  ASSERT_TRUE(rule.ok()) << rule.status().ToString();
  spec.allow.push_back(*rule);
  auto id = manager_->Create(spec);
  EXPECT_EQ(id.status().code(), Code::kInvalidArgument) << id.status().ToString();
}

TEST_F(SandboxTest, OnlyLoopbackInTheNetworkNamespace) {
  const std::string id = CreateOrDie();
  ExecResult r = Sh(id, "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '");
  EXPECT_EQ(r.stdout_data, "lo\n");
  ExecResult loop = Run(id, {"python3", "-c",
                             "import socket\n"
                             "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
                             "c = socket.create_connection(s.getsockname()); print('ok')\n"});
  EXPECT_EQ(loop.stdout_data, "ok\n") << loop.stderr_data;
}

TEST_F(SandboxTest, ReadWriteBindSharesAHostDirectory) {
  char dir[] = "/tmp/flashroll-rw-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  // The sandbox's root is its range's uid on the host: the directory must
  // let it write.
  ASSERT_EQ(chmod(dir, 0777), 0);
  SandboxSpec spec;
  spec.rw_paths = {dir};
  const std::string id = CreateOrDie(spec);
  ExecResult r = Sh(id, std::string("echo shared > ") + dir + "/f");
  EXPECT_EQ(r.exit_code, 0) << r.stderr_data;
  EXPECT_EQ(ReadHostFile(std::string(dir) + "/f"), "shared\n");
  ASSERT_TRUE(manager_->Destroy(id).ok());
  unlink((std::string(dir) + "/f").c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace flashroll::sandbox

namespace flashroll::sandbox {
namespace {

TEST(SandboxWarmPoolTest, PreStartedSandboxesGetTheirLimitsAndLeaveNothing) {
  if (geteuid() != 0) GTEST_SKIP() << "sandbox tests need root";
  Manager::Options options;
  options.warm_pool = 1;
  auto manager = Manager::Open(options);
  ASSERT_TRUE(manager.ok()) << manager.status().ToString();
  // Wait until the pool has started one sandbox of each image.
  for (int i = 0; i < 500 && CgroupDirsWithPrefix(OwnNamePrefix()).size() < 2 * 5; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE((*manager)->List().empty());  // pooled sandboxes are not listed

  SandboxSpec spec;
  spec.image = ImageKind::kBusybox;
  spec.memory_bytes = 48 << 20;
  spec.pids = 16;
  spec.env = {"PATH=/bin", "WHO=pool"};
  auto id = (*manager)->Create(spec);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  // A pooled sandbox has a user namespace and a range of its own too.
  auto info = (*manager)->Info(*id);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_GE(info->host_uid, 65536u);
  EXPECT_NE(ReadHostFile("/proc/" + std::to_string(info->init_pid) + "/status")
                .find("Uid:\t" + std::to_string(info->host_uid) + "\t"),
            std::string::npos);
  const std::string memory = ReadHostFile("/sys/fs/cgroup/memory/flashroll/" + *id + "/memory.limit_in_bytes");
  if (!memory.empty()) {
    EXPECT_EQ(memory, std::to_string(48 << 20) + "\n");
    EXPECT_EQ(ReadHostFile("/sys/fs/cgroup/pids/flashroll/" + *id + "/pids.max"), "16\n");
  }
  ExecRequest request;
  request.argv = {"/bin/sh", "-c", "echo $WHO; hostname"};
  auto r = (*manager)->Exec(*id, request);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stdout_data, "pool\nsandbox\n");
  // A spec the pool cannot serve (a read-write bind) still works, cold.
  SandboxSpec cold;
  cold.rw_paths = {"/tmp"};
  auto cold_id = (*manager)->Create(cold);
  ASSERT_TRUE(cold_id.ok()) << cold_id.status().ToString();
  EXPECT_EQ((*manager)->List().size(), 2u);
  // Nor can a seccomp profile of its own: it starts cold and is enforced
  // (a pooled sandbox runs the default filter, which allows mkdir).
  char dir[] = "/tmp/flashroll-pool-seccomp-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string profile = std::string(dir) + "/deny-mkdir.json";
  std::ofstream(profile) << R"({"defaultAction": "SCMP_ACT_ALLOW", "allowUnlisted": true, "syscalls": [)"
                         << R"({"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1}]})";
  SandboxSpec filtered;
  filtered.seccomp = profile;
  auto filtered_id = (*manager)->Create(filtered);
  ASSERT_TRUE(filtered_id.ok()) << filtered_id.status().ToString();
  request.argv = {"/bin/sh", "-c", "mkdir /tmp/made && echo made || echo refused"};
  r = (*manager)->Exec(*filtered_id, request);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stdout_data, "refused\n") << r->stderr_data;
  std::filesystem::remove_all(dir);
  manager->reset();
  EXPECT_TRUE(CgroupDirsWithPrefix(OwnNamePrefix()).empty());
}

}  // namespace
}  // namespace flashroll::sandbox
