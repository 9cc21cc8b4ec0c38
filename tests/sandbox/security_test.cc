// Escape and abuse attempts: each must fail while the host stays intact.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <vector>
#include <grp.h>

#include "sandbox/image.h"
#include "tests/sandbox/sandbox_fixture.h"

namespace flashroll::sandbox {
namespace {

class SandboxSecurityTest : public SandboxFixture {};

// Calls each system call through ctypes and prints "name errno-name".
constexpr char kSyscallProbe[] = R"PY(
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def probe(name, fn):
    r = fn()
    e = ctypes.get_errno()
    print(name, 'ok' if r == 0 else errno.errorcode.get(e, str(e)))
probe('mount', lambda: libc.mount(b'none', b'/mnt', b'tmpfs', 0, None))
probe('umount', lambda: libc.umount2(b'/proc', 2))
probe('ptrace', lambda: libc.ptrace(16, 1, 0, 0))
probe('init_module', lambda: libc.syscall(175, None, 0, b''))
probe('finit_module', lambda: libc.syscall(313, os.open('/dev/null', os.O_RDONLY), b'', 0))
probe('delete_module', lambda: libc.syscall(176, b'ext4', 0))
probe('unshare_user', lambda: libc.unshare(0x10000000))
probe('unshare_mnt', lambda: libc.unshare(0x00020000))
probe('setns', lambda: libc.setns(os.open('/proc/self/ns/net', os.O_RDONLY), 0))
probe('bpf', lambda: libc.syscall(321, 0, None, 0))
probe('perf_event_open', lambda: libc.syscall(298, None, 0, -1, -1, 0))
probe('kexec_load', lambda: libc.syscall(246, 0, 0, None, 0))
probe('keyctl', lambda: libc.syscall(250, 0, 0, 0, 0, 0))
probe('pivot_root', lambda: libc.syscall(155, b'/tmp', b'/tmp'))
probe('vsock', lambda: 0 if libc.socket(40, 1, 0) >= 0 else -1)
probe('modify_ldt', lambda: libc.syscall(154, 0, ctypes.create_string_buffer(16), 16))
probe('clone3', lambda: libc.syscall(435, None, 0))
probe('lsm_list_modules', lambda: libc.syscall(461, None, None, 0))
probe('unassigned', lambda: libc.syscall(1000))
)PY";

TEST_F(SandboxSecurityTest, DangerousSystemCallsFail) {
  const std::string id = CreateOrDie();
  ExecResult r = Run(id, {"python3", "-c", kSyscallProbe});
  ASSERT_EQ(r.exit_code, 0) << r.stderr_data;
  EXPECT_EQ(r.stdout_data,
            "mount EPERM\numount EPERM\nptrace EPERM\ninit_module EPERM\nfinit_module EPERM\n"
            "delete_module EPERM\nunshare_user EPERM\nunshare_mnt EPERM\nsetns EPERM\nbpf EPERM\n"
            "perf_event_open EPERM\nkexec_load EPERM\nkeyctl EPERM\npivot_root EPERM\nvsock EPERM\nmodify_ldt EPERM\n"
            // Default deny: what the filter does not list is not there.
            "clone3 ENOSYS\nlsm_list_modules ENOSYS\nunassigned ENOSYS\n");
  // The command-line tools fail too.
  EXPECT_NE(Sh(id, "mount -t tmpfs none /mnt").exit_code, 0);
  EXPECT_NE(Sh(id, "unshare -U -r true").exit_code, 0);
  EXPECT_NE(Sh(id, "unshare -m true").exit_code, 0);
}

TEST_F(SandboxSecurityTest, WritingOutsideTheWritableLayerFails) {
  const std::string id = CreateOrDie();
  const std::string probe = "flashroll-sandbox-probe-" + std::to_string(getpid());
  ExecResult r = Sh(id, "echo x > /usr/lib/" + probe + "; echo $?; echo x > /etc/passwd; echo $?; "
                        "echo x > /etc/" + probe + "; echo $?; echo x > /proc/sys/kernel/hostname; echo $?");
  // /usr is a read-only bind; /etc (the image's copies) and new files in it
  // land in the sandbox's writable layer; sysctls are read-only.
  EXPECT_EQ(r.stdout_data, "2\n0\n0\n2\n") << r.stderr_data;
  EXPECT_EQ(Sh(id, "cat /etc/passwd").stdout_data, "x\n");
  // Neither the host's file nor the cached image below the sandbox changed.
  auto image = ResolveImage(SandboxSpec());
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  EXPECT_NE(ReadHostFile(image->lower + "/etc/passwd").find("root:"), std::string::npos);
  EXPECT_NE(access(("/usr/lib/" + probe).c_str(), F_OK), 0);
  EXPECT_NE(access(("/etc/" + probe).c_str(), F_OK), 0);
  EXPECT_NE(ReadHostFile("/etc/passwd").find("root:"), std::string::npos);
  char host[256] = {};
  gethostname(host, sizeof(host));
  EXPECT_NE(std::string(host), "x");
}

TEST_F(SandboxSecurityTest, SetUidFilesAndDeviceNodesInAReadWriteBindGiveNothing) {
  char dir[] = "/tmp/flashroll-rw-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string rw = dir;
  ASSERT_EQ(chmod(rw.c_str(), 0777), 0);  // writable by the sandbox's range
  // A copy of id, set-uid to nobody, and a device node, made on the host.
  std::filesystem::copy_file("/usr/bin/id", rw + "/suid-id");
  ASSERT_EQ(chown((rw + "/suid-id").c_str(), 65534, 65534), 0);
  ASSERT_EQ(chmod((rw + "/suid-id").c_str(), 04755), 0);
  ASSERT_EQ(mknod((rw + "/null").c_str(), S_IFCHR | 0666, makedev(1, 3)), 0);
  SandboxSpec spec;
  spec.rw_paths = {rw};
  const std::string id = CreateOrDie(spec);
  // Without nosuid the set-uid bit would make the effective uid 65534.
  ExecResult r = Sh(id, rw + "/suid-id -u; echo x > " + rw + "/null && echo wrote || echo refused");
  EXPECT_EQ(r.stdout_data, "0\nrefused\n") << r.stderr_data;
  // The bind is still writable, and /dev/null (a device itself) still works.
  EXPECT_EQ(Sh(id, "echo y > " + rw + "/made && echo x > /dev/null && cat " + rw + "/made").stdout_data, "y\n");
  ASSERT_TRUE(manager_->Destroy(id).ok());
  std::filesystem::remove_all(rw);
}

// Runs `path` with `arg` on the host as nobody; returns its stdout.
std::string RunAsNobody(const std::string& path, const char* arg) {
  int out[2];
  if (pipe(out) != 0) return "pipe failed";
  const pid_t child = fork();
  if (child == 0) {
    dup2(out[1], 1);
    if (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0) _exit(126);
    execl(path.c_str(), path.c_str(), arg, nullptr);
    _exit(127);
  }
  close(out[1]);
  std::string text;
  char buf[256];
  for (ssize_t n; (n = read(out[0], buf, sizeof(buf))) > 0;) text.append(buf, static_cast<size_t>(n));
  close(out[0]);
  int status = 0;
  waitpid(child, &status, 0);
  return text;
}

// The attack: root inside copies a binary into a shared directory and makes
// it set-uid; a user on the host runs it. It must not be root there.
TEST_F(SandboxSecurityTest, ASetUidFilePlantedThroughAReadWriteBindIsNotRootOnTheHost) {
  char dir[] = "/tmp/flashroll-plant-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string rw = dir;
  ASSERT_EQ(chmod(rw.c_str(), 0777), 0);
  SandboxSpec spec;
  spec.rw_paths = {rw};
  const std::string id = CreateOrDie(spec);
  ExecResult r = Sh(id, "cp /usr/bin/id " + rw + "/id && chmod 4755 " + rw + "/id && stat -c '%u %a' " + rw + "/id");
  ASSERT_EQ(r.stdout_data, "0 4755\n") << r.stderr_data;
  const std::string host_uid = std::to_string(manager_->Info(id)->host_uid);
  struct stat st {};
  ASSERT_EQ(stat((rw + "/id").c_str(), &st), 0);
  EXPECT_EQ(std::to_string(st.st_uid), host_uid);
  EXPECT_NE(st.st_mode & S_ISUID, 0u);
  // The bit works on the host's mount, for the range's uid only.
  const std::string euid = RunAsNobody(rw + "/id", "-u");
  EXPECT_NE(euid, "0\n");
  EXPECT_EQ(euid, host_uid + "\n");
  ASSERT_TRUE(manager_->Destroy(id).ok());
  std::filesystem::remove_all(rw);
}

TEST_F(SandboxSecurityTest, RootOnlyProcFilesAreNotReadable) {
  const std::string id = CreateOrDie();
  ExecResult r = Run(id, {"python3", "-c", R"PY(
import errno
for name in ['kpageflags', 'kpagecount', 'kpagecgroup', 'slabinfo', 'vmallocinfo']:
    try:
        open('/proc/' + name, 'rb').read(8)
        print(name, 'read')
    except OSError as e:
        print(name, errno.errorcode[e.errno])
)PY"});
  EXPECT_EQ(r.stdout_data, "kpageflags EACCES\nkpagecount EACCES\nkpagecgroup EACCES\nslabinfo EACCES\n"
                           "vmallocinfo EACCES\n") << r.stderr_data;
}

// The kernel's build config (which hardening is compiled in) and ACPI's
// host-hardware knobs are masked: empty inside.
TEST_F(SandboxSecurityTest, ProcAcpiAndConfigGzAreMasked) {
  if (access("/proc/config.gz", R_OK) != 0 || access("/proc/acpi", R_OK) != 0) {
    GTEST_SKIP() << "this kernel has no /proc/config.gz or /proc/acpi";
  }
  const std::string id = CreateOrDie();
  // On a VM whose /proc/acpi is empty anyway, the mount shows the mask.
  const ExecResult r = Sh(id, "wc -c < /proc/config.gz; ls -A /proc/acpi | wc -l; touch /proc/acpi/x; echo $?; "
                              "grep -c ' /proc/acpi ro,' /proc/self/mountinfo");
  EXPECT_EQ(r.stdout_data, "0\n0\n1\n1\n") << r.stderr_data;
}

// Every rlimit is the sandbox's: a manager running with a low open-file
// limit and unlimited core dumps passes neither on.
TEST_F(SandboxSecurityTest, ResourceLimitsAreTheSandboxsNotTheManagers) {
  rlimit nofile {}, core {};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &nofile), 0);
  ASSERT_EQ(getrlimit(RLIMIT_CORE, &core), 0);
  const rlimit low_nofile{200, nofile.rlim_max};
  const rlimit unlimited_core{RLIM_INFINITY, RLIM_INFINITY};
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low_nofile), 0);
  ASSERT_EQ(setrlimit(RLIMIT_CORE, &unlimited_core), 0);
  auto id = manager_->Create(SandboxSpec());
  setrlimit(RLIMIT_NOFILE, &nofile);
  setrlimit(RLIMIT_CORE, &core);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  const ExecResult r = Sh(*id, "ulimit -n; ulimit -Hn; ulimit -c; ulimit -Hc; ulimit -l; ulimit -s; ulimit -r");
  // Hard limits are at most the manager's (it may lack CAP_SYS_RESOURCE).
  const std::string hard_nofile = std::to_string(std::min<rlim_t>(524288, nofile.rlim_max));
  EXPECT_EQ(r.stdout_data, "1024\n" + hard_nofile + "\n0\n0\n8192\n8192\n0\n") << r.stderr_data;
  // Raising past the hard limit fails inside: no core dumps, ever.
  EXPECT_NE(Sh(*id, "ulimit -c unlimited").exit_code, 0);
}

// A manager holding more descriptors than a sandbox's open-file limit (a
// sandboxd with a few hundred idle sandboxes) still starts sandboxes: the
// child copies the manager's descriptor table, and with the limit set
// before its last opens every create failed with EMFILE ("landlock:
// open(O_PATH) /bin: Too many open files" at 245 sandboxes in
// bench/sandbox_density.sh).
TEST_F(SandboxSecurityTest, AManagerHoldingManyDescriptorsStillStartsSandboxes) {
  rlimit nofile {};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &nofile), 0);
  if (nofile.rlim_cur < 2048) GTEST_SKIP() << "the open-file limit is below 2048";
  std::vector<int> held;
  for (int i = 0; i < 1200; ++i) {
    const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    held.push_back(fd);
  }
  auto id = manager_->Create(SandboxSpec());
  for (int fd : held) ::close(fd);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  const ExecResult r = Sh(*id, "ulimit -n");
  EXPECT_EQ(r.stdout_data, "1024\n") << r.stderr_data;
}

// Opens each path with the given flags and prints "path ok" or "path ERRNO".
constexpr char kOpenProbe[] = R"PY(
import errno, os, sys
for arg in sys.argv[1:]:
    path, how = arg.rsplit(':', 1)
    try:
        os.close(os.open(path, {'r': os.O_RDONLY, 'w': os.O_WRONLY, 'rw': os.O_RDWR}[how]))
        print(path, 'ok')
    except OSError as e:
        print(path, errno.errorcode[e.errno])
)PY";

// Device nodes the host makes reach the sandbox through --rw; none of them
// may be opened, while the sandbox's own devices work.
TEST_F(SandboxSecurityTest, OnlyTheSandboxsOwnDevicesOpen) {
  char dir[] = "/tmp/flashroll-dev-XXXXXX";
  char other[] = "/tmp/flashroll-dev-bound-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  ASSERT_NE(mkdtemp(other), nullptr);
  const std::string rw = dir;
  const std::string bound = std::string(other) + "/kmsg";
  ASSERT_EQ(chmod(rw.c_str(), 0777), 0);
  struct stat root {};
  ASSERT_EQ(stat("/", &root), 0);
  // /dev/kmsg's numbers (opening it write-only needs no privilege) and the
  // host's root disk, world-readable, in the directory; and the former
  // bound in as a path of its own (a bound device node is not nodev).
  ASSERT_EQ(mknod((rw + "/kmsg").c_str(), S_IFCHR, makedev(1, 11)), 0);
  ASSERT_EQ(mknod(bound.c_str(), S_IFCHR, makedev(1, 11)), 0);
  ASSERT_EQ(mknod((rw + "/disk").c_str(), S_IFBLK, root.st_dev), 0);
  for (const std::string& node : {rw + "/kmsg", bound, rw + "/disk"}) ASSERT_EQ(chmod(node.c_str(), 0666), 0);
  SandboxSpec spec;
  spec.rw_paths = {rw, bound};
  const std::string id = CreateOrDie(spec);
  ExecResult r = Run(id, {"python3", "-c", kOpenProbe, bound + ":w", rw + "/kmsg:w", rw + "/disk:r",
                          "/dev/null:rw", "/dev/zero:rw", "/dev/full:rw", "/dev/random:rw", "/dev/urandom:rw",
                          "/dev/ptmx:rw", "/dev/tty:rw"});
  // EPERM: the device program. EACCES: the --rw directory is nodev too.
  // ENXIO: /dev/tty opens, and finds no controlling terminal.
  EXPECT_EQ(r.stdout_data, bound + " EPERM\n" + rw + "/kmsg EACCES\n" + rw +
                               "/disk EACCES\n/dev/null ok\n/dev/zero ok\n/dev/full ok\n/dev/random ok\n"
                               "/dev/urandom ok\n/dev/ptmx ok\n/dev/tty ENXIO\n")
      << r.stderr_data;
  // A pseudo-terminal pair works end to end.
  ExecResult pty = Run(id, {"python3", "-c",
                            "import os, pty\nm, s = pty.openpty()\nos.write(s, b'x')\nprint(os.read(m, 1))"});
  EXPECT_EQ(pty.stdout_data, "b'x'\n") << pty.stderr_data;
  ASSERT_TRUE(manager_->Destroy(id).ok());
  std::filesystem::remove_all(rw);
  std::filesystem::remove_all(other);
}

TEST_F(SandboxSecurityTest, DirectoryImageStaysUntouched) {
  char dir[] = "/tmp/flashroll-image-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string image = dir;
  std::filesystem::create_directories(image + "/bin");
  std::filesystem::copy_file("/bin/busybox", image + "/bin/busybox");
  std::filesystem::create_symlink("busybox", image + "/bin/sh");
  { std::ofstream(image + "/data.txt") << "original\n"; }
  // A symlink in the image pointing at the host's /etc must not redirect mounts or writes.
  std::filesystem::create_symlink("/etc", image + "/hostetc");

  SandboxSpec spec;
  spec.image = ImageKind::kDirectory;
  spec.image_dir = image;
  const std::string id = CreateOrDie(spec);
  ExecResult r = Run(id, {"/bin/sh", "-c",
                          "echo changed > /data.txt; /bin/busybox cat /data.txt; /bin/busybox rm /bin/sh; "
                          "echo x > /hostetc/flashroll-escape; /bin/busybox ls /bin"});
  EXPECT_EQ(r.stdout_data, "changed\nbusybox\n") << r.stderr_data;
  ASSERT_TRUE(manager_->Destroy(id).ok());
  EXPECT_EQ(ReadHostFile(image + "/data.txt"), "original\n");
  EXPECT_TRUE(std::filesystem::is_symlink(image + "/bin/sh"));
  EXPECT_NE(access("/etc/flashroll-escape", F_OK), 0);
  std::filesystem::remove_all(image);
}

TEST_F(SandboxSecurityTest, DeletingUsrBinInsideLeavesTheHostIntact) {
  const std::string id = CreateOrDie();
  ExecResult host_image = Sh(id, "rm -rf /usr/bin 2>/dev/null; test -x /usr/bin/ls && echo still-there");
  EXPECT_EQ(host_image.stdout_data, "still-there\n");

  SandboxSpec busybox;
  busybox.image = ImageKind::kBusybox;
  const std::string bb = CreateOrDie(busybox);
  // In the busybox image the trees are writable: the sandbox can wreck
  // itself, only itself (though not remove a top-level entry: "/" is
  // read-only to Landlock).
  ExecResult wreck = Run(bb, {"/bin/busybox", "rm", "-rf", "/usr/bin", "/bin/busybox"});
  EXPECT_EQ(wreck.exit_code, 0) << wreck.stderr_data;
  EXPECT_EQ(Run(bb, {"/bin/busybox", "true"}).exit_code, 127);
  ASSERT_TRUE(manager_->Destroy(bb).ok());
  EXPECT_EQ(access("/usr/bin/ls", X_OK), 0);
  EXPECT_EQ(access("/var/lib/flashroll/images/busybox/bin/busybox", X_OK), 0);
  const std::string fresh = CreateOrDie(busybox);
  EXPECT_EQ(Run(fresh, {"/bin/sh", "-c", "echo ok"}).stdout_data, "ok\n");
}

TEST_F(SandboxSecurityTest, SignallingHostProcessesFails) {
  const pid_t victim = fork();
  ASSERT_GE(victim, 0);
  if (victim == 0) {
    execl("/bin/sleep", "sleep", "60", nullptr);
    _exit(127);
  }
  const std::string id = CreateOrDie();
  ExecResult r = Sh(id, "kill -9 " + std::to_string(victim) + "; echo $?; kill -9 -1; echo done");
  EXPECT_EQ(r.stdout_data.substr(0, 2), "1\n") << r.stdout_data << r.stderr_data;
  EXPECT_EQ(kill(victim, 0), 0) << "the host process was killed from inside the sandbox";
  kill(victim, SIGKILL);
  waitpid(victim, nullptr, 0);
}

TEST_F(SandboxSecurityTest, HostProcessesAndSecretsAreInvisible) {
  const std::string id = CreateOrDie();
  ExecResult r = Sh(id, "ls /proc | grep -c '^[0-9]'; cut -d: -f2 /etc/shadow | grep -v '^[*]$' && echo hash; "
                        "test -e /sys/fs/cgroup && echo cgroupfs; cat /proc/1/environ | wc -c");
  // init, sh, ls, grep at most, plus the pipeline.
  EXPECT_LE(std::stoi(r.stdout_data), 8);
  // The host image's /etc/shadow (for PAM) locks every account: no hash of the host's.
  EXPECT_EQ(r.stdout_data.find("hash"), std::string::npos) << r.stdout_data;
  EXPECT_EQ(r.stdout_data.find("cgroupfs"), std::string::npos);
}

TEST_F(SandboxSecurityTest, DiskQuotaBoundsTheWritableLayer) {
  SandboxSpec spec;
  spec.disk_bytes = 16 << 20;
  const std::string id = CreateOrDie(spec);
  ExecResult r = Sh(id, "dd if=/dev/zero of=/root/big bs=1M count=64 2>/dev/null; echo $?");
  EXPECT_EQ(r.stdout_data, "1\n");
}

}  // namespace
}  // namespace flashroll::sandbox
