// Root inside a sandbox can do what real software needs (sandbox/caps.h):
// chown, su, setpriv --init-groups, binding :80, chroot, a postgres server
// dropping to its own user, exec as a named user — and none of it reaches
// the host or another sandbox. Needs root (skips otherwise).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "sandbox/caps.h"
#include "tests/sandbox/sandbox_fixture.h"

namespace flashroll::sandbox {
namespace {

class SandboxCapsTest : public SandboxFixture {
 protected:
  std::string HostPath(const std::string& id, const std::string& path) {
    return "/proc/" + std::to_string(manager_->Info(id)->init_pid) + "/root" + path;
  }

  uint32_t HostUid(const std::string& id) { return manager_->Info(id)->host_uid; }
};

std::string Hex(uint64_t mask) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(mask));
  return text;
}

TEST_F(SandboxCapsTest, RootHoldsTheBoundedSetAcrossExecAndNothingElse) {
  const std::string id = CreateOrDie();
  const std::string mask = Hex(SandboxCapabilityMask());
  // /bin/sh execs grep: the set survives the exec.
  ExecResult r = Sh(id, "grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' /proc/self/status");
  EXPECT_EQ(r.stdout_data, "CapInh:\t0000000000000000\nCapPrm:\t" + mask + "\nCapEff:\t" + mask + "\nCapBnd:\t" +
                               mask + "\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\n");
  // Never these.
  for (int cap : {CAP_SYS_ADMIN, CAP_SYS_MODULE, CAP_SYS_PTRACE, CAP_NET_ADMIN, CAP_NET_RAW, CAP_MKNOD,
                  CAP_SYS_RAWIO, CAP_DAC_READ_SEARCH, CAP_SETFCAP, CAP_SYS_TIME, CAP_BPF}) {
    EXPECT_EQ(SandboxCapabilityMask() >> cap & 1, 0u) << "capability " << cap;
  }
}

TEST_F(SandboxCapsTest, ChownSuSetprivAndChrootWork) {
  const std::string id = CreateOrDie();
  ExecResult r = Sh(id,
                    "touch /tmp/f && chown 1000:1000 /tmp/f && stat -c '%u:%g' /tmp/f; "
                    "su -s /bin/sh nobody -c 'id -u; id -g; grep CapEff /proc/self/status'; "
                    "setpriv --reuid=65534 --regid=65534 --init-groups id; "
                    "mkdir -p /tmp/jail/bin && cp /usr/bin/busybox /tmp/jail/bin/ 2>/dev/null || "
                    "cp /bin/busybox /tmp/jail/bin/; chroot /tmp/jail /bin/busybox echo chrooted");
  EXPECT_EQ(r.exit_code, 0) << r.stderr_data;
  EXPECT_EQ(r.stdout_data,
            "1000:1000\n65534\n65534\nCapEff:\t0000000000000000\n"
            "uid=65534(nobody) gid=65534(nogroup) groups=65534(nogroup)\nchrooted\n")
      << r.stderr_data;
  // On the host the file belongs to the sandbox's range, not to uid 1000
  // or root.
  struct stat st {};
  ASSERT_EQ(::stat(HostPath(id, "/tmp/f").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, HostUid(id) + 1000);
  EXPECT_EQ(st.st_gid, HostUid(id) + 1000);
}

TEST_F(SandboxCapsTest, AnyUserBindsPort80InItsOwnNetworkOnly) {
  const std::string host_knob = ReadHostFile("/proc/sys/net/ipv4/ip_unprivileged_port_start");
  const std::string id = CreateOrDie();
  const std::string bind80 =
      "python3 -c \"import socket; s = socket.socket(); s.bind(('127.0.0.1', 80)); s.listen(); print('bound')\"";
  EXPECT_EQ(Sh(id, bind80).stdout_data, "bound\n");
  EXPECT_EQ(ShAs(id, "nobody", "", bind80).stdout_data, "bound\n");
  EXPECT_EQ(ReadHostFile("/proc/sys/net/ipv4/ip_unprivileged_port_start"), host_knob);
}

TEST_F(SandboxCapsTest, ExecRunsAsTheNamedUserWithItsGroupsAndNoCapabilities) {
  const std::string id = CreateOrDie();
  ExecResult r = ShAs(id, "nobody", "", "id; grep -E '^Cap(Prm|Eff):' /proc/self/status");
  EXPECT_EQ(r.stdout_data,
            "uid=65534(nobody) gid=65534(nogroup) groups=65534(nogroup)\n"
            "CapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n")
      << r.stderr_data;
  // Numbers, one not in /etc/passwd; a group by name.
  EXPECT_EQ(ShAs(id, "4242", "", "id -u; id -g").stdout_data, "4242\n0\n");
  EXPECT_EQ(ShAs(id, "65534", "daemon", "id -u; id -gn").stdout_data, "65534\ndaemon\n");
  EXPECT_EQ(ShAs(id, "", "daemon", "id -u; id -gn").stdout_data, "0\ndaemon\n");
  // As that user: a directory only root may enter is refused as the cwd.
  ASSERT_EQ(Sh(id, "mkdir -m 700 /tmp/private").exit_code, 0);
  ExecResult refused = ShAs(id, "nobody", "", "pwd", "/tmp/private");
  EXPECT_EQ(refused.exit_code, 126);
  EXPECT_NE(ShAs(id, "nobody", "", "cat /tmp/private/x; touch /tmp/private/y").exit_code, 0);
  // Unknown names fail with a message naming them.
  ExecResult unknown = ShAs(id, "no-such-user", "", "id");
  EXPECT_EQ(unknown.exit_code, 126);
  EXPECT_NE(unknown.stderr_data.find("user \"no-such-user\": no such user"), std::string::npos) << unknown.stderr_data;
  ExecResult bad_group = ShAs(id, "nobody", "no-such-group", "id");
  EXPECT_EQ(bad_group.exit_code, 126);
  EXPECT_NE(bad_group.stderr_data.find("group \"no-such-group\": no such group"), std::string::npos);
  // A uid outside the sandbox's range cannot be taken.
  ExecResult unmapped = ShAs(id, "70000", "", "id");
  EXPECT_EQ(unmapped.exit_code, 126);
  EXPECT_NE(unmapped.stderr_data.find("cannot become uid 70000"), std::string::npos) << unmapped.stderr_data;
  // Bad input never reaches the sandbox.
  ExecRequest colon;
  colon.argv = {"id"};
  colon.user = "a:b";
  EXPECT_EQ(manager_->Exec(id, colon).status().code(), Code::kInvalidArgument);
}

TEST_F(SandboxCapsTest, TheSandboxsDefaultUserRunsExecsThatNameNone) {
  SandboxSpec spec;
  spec.user = "nobody";
  const std::string id = CreateOrDie(spec);
  EXPECT_EQ(Sh(id, "id -un").stdout_data, "nobody\n");
  EXPECT_EQ(ShAs(id, "root", "", "id -un").stdout_data, "root\n");
  EXPECT_EQ(ShAs(id, "0", "", "id -u").stdout_data, "0\n");
}

// The attacker's steps against the host and its neighbours: none of the
// capabilities reach outside the sandbox's own ids, files and processes.
TEST_F(SandboxCapsTest, CapabilitiesReachNeitherTheHostNorAnotherSandbox) {
  char dir[] = "/tmp/flashroll-caps-rw-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string rw = dir;
  ASSERT_EQ(::chmod(rw.c_str(), 0777), 0);
  // A host root's secret and a host user's file in the shared directory.
  std::ofstream(rw + "/root-secret") << "host secret\n";
  ASSERT_EQ(::chmod((rw + "/root-secret").c_str(), 0600), 0);
  std::ofstream(rw + "/users-file") << "a host user's\n";
  ASSERT_EQ(::chown((rw + "/users-file").c_str(), 1000, 1000), 0);
  ASSERT_EQ(::chmod((rw + "/users-file").c_str(), 0644), 0);
  SandboxSpec spec;
  spec.rw_paths = {rw};
  const std::string a = CreateOrDie(spec);
  const std::string b = CreateOrDie();
  ExecResult r = Sh(a, "cd " + rw +
                           " && { cat root-secret || echo no-read; } && { chown 0:0 users-file || echo no-chown; } && "
                           "{ chmod 666 users-file || echo no-chmod; } && { echo x >> users-file || echo no-write; } && "
                           "{ rm -f root-secret && echo removed || echo no-rm; } && "
                           "touch mine && chown 0:0 mine && chmod 4755 mine && echo made");
  // rm works: the directory is world-writable (0777, no sticky bit), as
  // for any host user.
  EXPECT_EQ(r.stdout_data, "no-read\nno-chown\nno-chmod\nno-write\nremoved\nmade\n") << r.stderr_data;
  struct stat st {};
  ASSERT_EQ(::stat((rw + "/users-file").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000u);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  // Root inside made a file root's: on the host it is the sandbox's range.
  ASSERT_EQ(::stat((rw + "/mine").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, HostUid(a));
  EXPECT_EQ(st.st_gid, HostUid(a));

  // CAP_KILL does not reach a process of another sandbox: not by its host
  // pid, and not by its pid inside (which names a process of one's own
  // namespace, or none).
  ExecRequest sleeper;
  sleeper.argv = {"/bin/sh", "-c", "sleep 60 & echo $!"};
  auto started = manager_->Exec(b, sleeper);
  ASSERT_TRUE(started.ok());
  const std::string inside_pid = started->stdout_data.substr(0, started->stdout_data.find('\n'));
  const pid_t b_init = manager_->Info(b)->init_pid;
  ExecResult killed = Sh(a, "kill -9 " + std::to_string(b_init) + " || echo refused; kill -9 " + inside_pid +
                                " || echo refused");
  EXPECT_EQ(killed.stdout_data, "refused\nrefused\n") << killed.stderr_data;
  EXPECT_EQ(Sh(b, "kill -0 " + inside_pid + " && echo alive").stdout_data, "alive\n");
  EXPECT_EQ(::kill(b_init, 0), 0);

  // No CAP_SYS_ADMIN, no CAP_NET_ADMIN: mounts and network changes fail.
  ExecResult admin = Sh(a, "mount -t tmpfs none /mnt || echo no-mount; ip link add dummy0 type dummy 2>/dev/null || "
                           "echo no-link; ip link set lo down 2>/dev/null || echo no-down");
  EXPECT_EQ(admin.stdout_data, "no-mount\nno-link\nno-down\n") << admin.stderr_data;
  std::filesystem::remove_all(rw);
}

// A daemon that drops privileges: postgres's initdb refuses root, so it
// runs as the postgres user su gives it, and the server then starts and
// answers. Skips (visibly) where Debian's postgresql is not installed.
TEST_F(SandboxCapsTest, PostgresInitdbAndStartAsItsOwnUser) {
  std::string bin;
  for (const auto& entry : std::filesystem::directory_iterator("/usr/lib/postgresql", std::filesystem::directory_options::skip_permission_denied)) {
    if (std::filesystem::exists(entry.path() / "bin/initdb")) bin = (entry.path() / "bin").string();
  }
  if (bin.empty()) GTEST_SKIP() << "Debian's postgresql is not installed (apt-get install postgresql)";
  SandboxSpec spec;
  spec.memory_bytes = 512ull << 20;
  const std::string id = CreateOrDie(spec);
  const std::string script = "mkdir /tmp/pg && chown postgres:postgres /tmp/pg && su -s /bin/sh postgres -c '" + bin +
                             "/initdb -D /tmp/pg/data > /tmp/pg/initdb.log 2>&1 && " + bin +
                             "/pg_ctl -D /tmp/pg/data -o \"-k /tmp/pg -c listen_addresses=127.0.0.1\" -l /tmp/pg/log "
                             "-w start > /dev/null && psql -h /tmp/pg -d postgres -Atc \"select 40 + 2\"' || "
                             "cat /tmp/pg/initdb.log /tmp/pg/log";
  ExecResult r = Sh(id, script, std::chrono::seconds(120));
  EXPECT_EQ(r.stdout_data, "42\n") << r.stderr_data;
  EXPECT_EQ(Sh(id, "stat -c %U /tmp/pg/data/PG_VERSION").stdout_data, "postgres\n");
}

}  // namespace
}  // namespace flashroll::sandbox
