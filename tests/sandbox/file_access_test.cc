// Files through the sandbox's own eyes (sandbox/file_access.h): GetFile and
// PutFile act as the sandbox's user in its namespaces, refuse what is not a
// regular file at once, give up on a file that never answers, and hold no
// lock that an exec, Destroy or TTL expiry waits for. Needs root (skips
// otherwise).
#include "sandbox/file_access.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "sandbox/sandbox.h"
#include "tests/sandbox/sandbox_fixture.h"

namespace flashroll::sandbox {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

class FileAccessTest : public SandboxFixture {
 protected:
  // The host's way to `path` in the sandbox, for the test's own looks.
  std::string HostPath(const std::string& id, const std::string& path) {
    return "/proc/" + std::to_string(manager_->Info(id)->init_pid) + "/root" + path;
  }

  std::future<ExecResult> ShAsync(const std::string& id, const std::string& script) {
    return std::async(std::launch::async, [this, id, script] { return Sh(id, script); });
  }
};

// Runs `call` on another thread and waits a second for its answer. When none
// comes, `unblock` runs (its descriptors stay open until the call is over)
// so that the test fails instead of hanging.
template <typename T>
T AnswerWithinASecond(const std::string& what, std::function<T()> call,
                      const std::function<std::vector<UniqueFd>()>& unblock) {
  auto answer = std::async(std::launch::async, std::move(call));
  std::vector<UniqueFd> held;
  if (answer.wait_for(seconds(1)) != std::future_status::ready) {
    ADD_FAILURE() << what << ": no answer within a second";
    held = unblock();
  }
  return answer.get();
}

// The file's contents, or the error as text.
std::string Contents(const Result<std::string>& read) { return read.ok() ? *read : read.status().ToString(); }

void ExpectRefused(const Status& status, const std::string& needle) {
  EXPECT_EQ(status.code(), Code::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find(needle), std::string::npos) << status.ToString();
}

TEST_F(FileAccessTest, WhatIsNoRegularFileIsRefusedAtOnceWhileAnExecRuns) {
  const std::string id = CreateOrDie();
  ASSERT_EQ(Sh(id, "mkfifo /tmp/fifo && ln -s /tmp/loop /tmp/loop && "
                   "python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"/tmp/sock\")'")
                .exit_code,
            0);
  const std::string fifo = HostPath(id, "/tmp/fifo");
  // Opening the FIFO's other ends from the host ends a blocked open.
  auto unblock = [fifo] {
    std::vector<UniqueFd> ends;
    ends.emplace_back(::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
    ends.emplace_back(::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC));
    return ends;
  };
  auto exec = ShAsync(id, "sleep 0.5; echo done");
  auto get = [&](const std::string& path) {
    return AnswerWithinASecond<Status>("GET " + path, [&] { return manager_->GetFile(id, path).status(); }, unblock);
  };
  auto put = [&](const std::string& path) {
    return AnswerWithinASecond<Status>("PUT " + path, [&] { return manager_->PutFile(id, path, "x"); }, unblock);
  };
  ExpectRefused(get("/tmp/fifo"), "path /tmp/fifo: a fifo, not a regular file");
  ExpectRefused(put("/tmp/fifo"), "path /tmp/fifo: a fifo, not a regular file");
  ExpectRefused(get("/dev/zero"), "path /dev/zero: a character device, not a regular file");
  ExpectRefused(put("/dev/null"), "path /dev/null: a character device, not a regular file");
  ExpectRefused(get("/tmp/sock"), "path /tmp/sock: a socket, not a regular file");
  ExpectRefused(get("/tmp"), "path /tmp: a directory, not a regular file");
  ExpectRefused(put("/tmp"), "path /tmp: a directory, not a regular file");
  // A loop as the last component is a symlink; one on the way is a loop.
  ExpectRefused(get("/tmp/loop"), "path /tmp/loop: a symlink, not a regular file");
  ExpectRefused(get("/tmp/loop/x"), "path /tmp/loop/x: a symlink loop");
  ExpectRefused(put("/tmp/loop/x"), "path /tmp/loop/x: a symlink loop");
  ASSERT_EQ(exec.wait_for(seconds(5)), std::future_status::ready);
  EXPECT_EQ(exec.get().stdout_data, "done\n");
}

// Opening a FIFO would wake whoever waits at its other end: the files API
// looks at the path before it opens anything.
TEST_F(FileAccessTest, AFifoIsNotOpened) {
  const std::string id = CreateOrDie();
  ASSERT_EQ(Sh(id, "mkfifo /tmp/f && (exec 3> /tmp/f; touch /tmp/released) > /dev/null 2>&1 &").exit_code, 0);
  std::this_thread::sleep_for(milliseconds(100));  // the writer waits in open
  ExpectRefused(manager_->GetFile(id, "/tmp/f").status(), "a fifo");
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_EQ(manager_->GetFile(id, "/tmp/released").status().code(), Code::kNotFound);
  EXPECT_EQ(Sh(id, "cat /tmp/f; sleep 0.1; ls /tmp/released").stdout_data, "/tmp/released\n");
}

// The files API holds no capability, not even the sandbox root's bounded
// set: it reads and writes as an unprivileged owner would.
TEST_F(FileAccessTest, ReadsAndWritesWithoutTheManagersPrivileges) {
  const std::string id = CreateOrDie();
  auto kallsyms = manager_->GetFile(id, "/proc/kallsyms");
  ASSERT_TRUE(kallsyms.ok()) << kallsyms.status().ToString();
  std::istringstream lines(*kallsyms);
  std::string address, rest;
  size_t count = 0;
  while (lines >> address && std::getline(lines, rest)) {
    ++count;
    ASSERT_EQ(address.find_first_not_of('0'), std::string::npos) << "a kernel address: " << address << rest;
  }
  EXPECT_GT(count, 1000u);
  // The manager itself (root, CAP_SYSLOG) sees the real ones, where
  // kptr_restrict lets it.
  const std::string host = ReadHostFile("/proc/kallsyms").substr(0, 16);
  if (host.find_first_not_of('0') != std::string::npos) {
    EXPECT_NE(kallsyms->substr(0, 16), host);
  }

  // A file its owner (the sandbox's uid 0) has no permission bits for:
  // root inside reads it (CAP_DAC_OVERRIDE), the files API does not.
  EXPECT_EQ(Sh(id, "echo secret > /tmp/secret && chmod 000 /tmp/secret && cat /tmp/secret").stdout_data, "secret\n");
  EXPECT_EQ(ReadHostFile(HostPath(id, "/tmp/secret")), "secret\n");  // root with capabilities reads it
  EXPECT_EQ(manager_->GetFile(id, "/tmp/secret").status().code(), Code::kPermissionDenied);
  EXPECT_EQ(manager_->PutFile(id, "/tmp/secret", "overwritten").code(), Code::kPermissionDenied);
  EXPECT_EQ(ReadHostFile(HostPath(id, "/tmp/secret")), "secret\n");
}

// Files whose contents depend on the reader's namespaces read as inside.
TEST_F(FileAccessTest, ProcShowsTheSandboxsNamespaces) {
  const std::string id = CreateOrDie();
  // UTS.
  EXPECT_EQ(Contents(manager_->GetFile(id, "/proc/sys/kernel/hostname")), "sandbox\n");
  // cgroup.
  std::string inside = Sh(id, "cat /proc/1/cgroup").stdout_data;
  EXPECT_EQ(Contents(manager_->GetFile(id, "/proc/1/cgroup")), inside);
  EXPECT_NE(inside, ReadHostFile("/proc/" + std::to_string(manager_->Info(id)->init_pid) + "/cgroup"));
  // IPC: a segment of the host's is not listed.
  const int segment = ::shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0600);
  ASSERT_GE(segment, 0);
  inside = Sh(id, "cat /proc/sysvipc/shm").stdout_data;
  EXPECT_EQ(Contents(manager_->GetFile(id, "/proc/sysvipc/shm")), inside);
  EXPECT_NE(inside, ReadHostFile("/proc/sysvipc/shm"));
  ::shmctl(segment, IPC_RMID, nullptr);
  // Network: the host's interfaces are not there (the sandbox has only lo).
  std::istringstream devices(ReadHostFile("/proc/net/dev"));
  std::string line;
  while (std::getline(devices, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string name = line.substr(line.find_first_not_of(' '), colon - line.find_first_not_of(' '));
    const std::string knob = "/proc/sys/net/ipv4/conf/" + name + "/forwarding";
    const Code expected = name == "lo" ? Code::kOk : Code::kNotFound;
    EXPECT_EQ(manager_->GetFile(id, knob).status().code(), expected) << knob;
  }
}

TEST_F(FileAccessTest, WrittenFilesBelongToTheSandboxsUser) {
  const std::string id = CreateOrDie();
  ASSERT_TRUE(manager_->PutFile(id, "/tmp/owned", "one\n", 0600).ok());
  EXPECT_EQ(Sh(id, "stat -c '%u:%g %a' /tmp/owned; echo two >> /tmp/owned; cat /tmp/owned").stdout_data,
            "0:0 600\none\ntwo\n");
  // On the host: the sandbox's root, the base of its range, not the host's.
  auto info = manager_->Info(id);
  ASSERT_TRUE(info.ok());
  ASSERT_NE(info->host_uid, 0u);
  struct stat st {};
  ASSERT_EQ(::stat(HostPath(id, "/tmp/owned").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, info->host_uid);
  EXPECT_EQ(st.st_gid, info->host_uid);
}

// The manager's supplementary groups do not come along: a host file only
// its group may read stays unreadable, as it is to the sandbox itself.
TEST_F(FileAccessTest, TheManagersGroupsStayOutside) {
  char dir[] = "/tmp/flashroll-files-groups-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  ASSERT_EQ(::chmod(dir, 0755), 0);
  const std::string file = std::string(dir) + "/group-only";
  std::ofstream(file) << "for group 42\n";
  ASSERT_EQ(::chown(file.c_str(), 0, 42), 0);
  ASSERT_EQ(::chmod(file.c_str(), 0040), 0);
  SandboxSpec spec;
  spec.rw_paths = {dir};
  const std::string id = CreateOrDie(spec);
  EXPECT_NE(Sh(id, "cat " + file).exit_code, 0);
  std::vector<gid_t> saved(static_cast<size_t>(::getgroups(0, nullptr)));
  ASSERT_EQ(::getgroups(static_cast<int>(saved.size()), saved.data()), static_cast<int>(saved.size()));
  const gid_t group = 42;
  ASSERT_EQ(::setgroups(1, &group), 0);
  auto read = manager_->GetFile(id, file);
  ASSERT_EQ(::setgroups(saved.size(), saved.data()), 0);
  EXPECT_EQ(read.status().code(), Code::kPermissionDenied) << (read.ok() ? *read : read.status().ToString());
  ASSERT_TRUE(manager_->Destroy(id).ok());
  ::unlink(file.c_str());
  ::rmdir(dir);
}

TEST_F(FileAccessTest, PathsResolveInsideTheSandboxsRoot) {
  // One directory name on both sides of the sandbox, with different files.
  const std::string dir = "/tmp/flashroll-file-access-" + std::to_string(::getpid());
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  { std::ofstream(dir + "/marker") << "host\n"; }
  const std::string id = CreateOrDie();
  ASSERT_EQ(Sh(id, "mkdir -p " + dir + " && echo inside > " + dir + "/marker && ln -s " + dir +
                       " /root/absolute && ln -s ../../../../.. /root/up")
                .exit_code,
            0);
  EXPECT_EQ(Contents(manager_->GetFile(id, "/root/absolute/marker")), "inside\n");
  EXPECT_EQ(Contents(manager_->GetFile(id, "/root/up" + dir + "/marker")), "inside\n");
  EXPECT_EQ(Contents(manager_->GetFile(id, "/../../.." + dir + "/marker")), "inside\n");
  ASSERT_TRUE(manager_->PutFile(id, "/root/absolute/put", "x").ok());
  ASSERT_TRUE(manager_->PutFile(id, "/root/up/../.." + dir + "/put2", "y").ok());
  EXPECT_EQ(Sh(id, "cat " + dir + "/put " + dir + "/put2").stdout_data, "xy");
  EXPECT_NE(::access((dir + "/put").c_str(), F_OK), 0);
  EXPECT_NE(::access((dir + "/put2").c_str(), F_OK), 0);
  EXPECT_EQ(ReadHostFile(dir + "/marker"), "host\n");
  ::unlink((dir + "/marker").c_str());
  ::rmdir(dir.c_str());
}

// The helper is no process of the sandbox's: freezing it stops nothing of it.
TEST_F(FileAccessTest, FilesWorkWhileFrozen) {
  const std::string id = CreateOrDie();
  ASSERT_TRUE(manager_->Freeze(id).ok());
  EXPECT_TRUE(manager_->PutFile(id, "/tmp/cold", "ice").ok());
  EXPECT_EQ(Contents(manager_->GetFile(id, "/tmp/cold")), "ice");
  ASSERT_TRUE(manager_->Thaw(id).ok());
}

// This process's children that have exited and not been waited for.
int ZombieChildren() {
  int zombies = 0;
  const std::string self = std::to_string(::getpid());
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream status(entry.path() / "status");
    std::string line, state, ppid;
    while (std::getline(status, line)) {
      if (line.rfind("State:", 0) == 0) state = line.substr(6);
      if (line.rfind("PPid:", 0) == 0) ppid = line.substr(5);
    }
    const size_t at = ppid.find_first_not_of(" \t");
    if (at != std::string::npos && ppid.substr(at) == self && state.find('Z') != std::string::npos) ++zombies;
  }
  return zombies;
}

// Each file operation's helper process is waited for through its pidfd:
// none is left behind as a zombie of the manager.
TEST_F(FileAccessTest, EveryHelperIsReaped) {
  const std::string id = CreateOrDie();
  const int before = ZombieChildren();
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(manager_->PutFile(id, "/tmp/f" + std::to_string(i), "x").ok());
    EXPECT_EQ(Contents(manager_->GetFile(id, "/tmp/f" + std::to_string(i))), "x");
  }
  EXPECT_EQ(ZombieChildren(), before);
}

// A read that fails after its open (a process's /proc/PID/syscall, which
// the helper may open as the process's owner but not read: that needs
// ptrace access) is reported at once, naming the call, not retried until
// the file timeout.
TEST_F(FileAccessTest, AFailedReadIsReportedNamingIt) {
  const std::string id = CreateOrDie();
  ExecResult sleeper = Sh(id, "sleep 30 >/dev/null 2>&1 & echo $!");
  ASSERT_EQ(sleeper.exit_code, 0) << sleeper.stderr_data;
  while (!sleeper.stdout_data.empty() && sleeper.stdout_data.back() == '\n') sleeper.stdout_data.pop_back();
  const auto start = Clock::now();
  auto read = manager_->GetFile(id, "/proc/" + sleeper.stdout_data + "/syscall");
  ASSERT_FALSE(read.ok()) << "read " << read->size() << " bytes";
  EXPECT_NE(read.status().message().find(": read /proc/" + sleeper.stdout_data + "/syscall: "), std::string::npos)
      << read.status().ToString();
  EXPECT_LT(Clock::now() - start, seconds(2));
}

// The target is the init's root, opened once: an init that is gone (here a
// pid no process has) is an error naming what was opened, not a target
// without a root.
TEST(FileTargetTest, AnInitWithoutARootIsAnError) {
  UniqueFd self(static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0)));
  ASSERT_TRUE(self.valid());
  auto target = OpenFileTarget(999'999'999, self.get(), UsernsMode::kMapped);
  ASSERT_FALSE(target.ok());
  EXPECT_NE(target.status().message().find("open /proc/999999999/root"), std::string::npos)
      << target.status().ToString();
}

TEST_F(FileAccessTest, APathWithANulIsRefused) {
  const std::string id = CreateOrDie();
  ExpectRefused(manager_->PutFile(id, std::string("/tmp/a\0/b", 9), "x"), "contains NUL");
  EXPECT_EQ(manager_->GetFile(id, "/tmp/a").status().code(), Code::kNotFound);
  ExpectRefused(manager_->GetFile(id, "tmp/a").status(), "must be absolute");
}

TEST_F(FileAccessTest, ReadsStopAtMaxBytes) {
  const std::string id = CreateOrDie();
  ASSERT_TRUE(manager_->PutFile(id, "/tmp/ten", "0123456789").ok());
  EXPECT_EQ(Contents(manager_->GetFile(id, "/tmp/ten", 10)), "0123456789");
  const Status status = manager_->GetFile(id, "/tmp/ten", 9).status();
  EXPECT_EQ(status.code(), Code::kResourceExhausted) << status.ToString();
  EXPECT_NE(status.message().find("path /tmp/ten: larger than 9 bytes"), std::string::npos) << status.ToString();
}

// A file swapped for a FIFO between the look and the open is still refused,
// and the open does not wait for a writer.
TEST_F(FileAccessTest, AFileSwappedForAFifoIsRefused) {
  const std::string id = CreateOrDie();
  ASSERT_TRUE(manager_->PutFile(id, "/tmp/swap.py",
                                "import ctypes, os, time\n"
                                "libc = ctypes.CDLL(None, use_errno=True)\n"
                                "open('/tmp/x', 'w').write('regular')\n"
                                "os.mkfifo('/tmp/y')\n"
                                "open('/tmp/swapping', 'w').close()\n"
                                "end = time.time() + 20\n"
                                "while time.time() < end and not os.path.exists('/tmp/stop'):\n"
                                "    for _ in range(1000):\n"
                                "        libc.renameat2(-100, b'/tmp/x', -100, b'/tmp/y', 2)  # RENAME_EXCHANGE\n")
                  .ok());
  auto swapper = ShAsync(id, "python3 /tmp/swap.py");
  const auto deadline = Clock::now() + seconds(10);
  while (!manager_->GetFile(id, "/tmp/swapping").ok() && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  int regular = 0, fifo = 0;
  for (int i = 0; i < 400; ++i) {
    auto got = manager_->GetFile(id, "/tmp/x");
    if (got.ok() && *got == "regular") {
      ++regular;
    } else if (got.status().code() == Code::kInvalidArgument &&
               got.status().message().find("a fifo") != std::string::npos) {
      ++fifo;
    } else {
      ADD_FAILURE() << "answer " << i << ": " << Contents(got);
      break;
    }
  }
  EXPECT_GT(regular, 0);
  EXPECT_GT(fifo, 0);
  ASSERT_TRUE(manager_->PutFile(id, "/tmp/stop", "").ok());
  EXPECT_EQ(swapper.get().exit_code, 0);
}

TEST_F(FileAccessTest, AnInitThatHasExitedIsUnavailable) {
  const pid_t child = ::fork();
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  ASSERT_GT(child, 0);
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, child, 0)));
  ASSERT_TRUE(pidfd.valid());
  auto target = OpenFileTarget(child, pidfd.get(), UsernsMode::kNone);
  ASSERT_TRUE(target.ok()) << target.status().ToString();
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  const Status status = ReadFileAsSandbox(*target, "/etc/hostname", 1 << 20, seconds(5)).status();
  EXPECT_EQ(status.code(), Code::kUnavailable) << status.ToString();
}

// Mounts a FUSE filesystem that nobody serves at `path` in the sandbox's
// mount namespace: a lookup below it waits (killably) for an answer that
// never comes. Closing the returned /dev/fuse descriptor aborts the
// connection, which fails the waiting calls. Invalid on failure.
UniqueFd MountUnansweredFuse(pid_t init_pid, const std::string& path) {
  UniqueFd dev(::open("/dev/fuse", O_RDWR | O_CLOEXEC));
  const std::string proc = "/proc/" + std::to_string(init_pid);
  UniqueFd ns(::open((proc + "/ns/mnt").c_str(), O_RDONLY | O_CLOEXEC));
  UniqueFd root(::open((proc + "/root").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dev.valid() || !ns.valid() || !root.valid()) return UniqueFd();
  // allow_other: the sandbox's root, who reads it, is not the host's.
  const std::string options = "fd=" + std::to_string(dev.get()) + ",rootmode=40000,user_id=0,group_id=0,allow_other";
  // setns into a mount namespace needs a single-threaded process.
  const pid_t child = ::fork();
  if (child == 0) {
    const bool mounted = ::setns(ns.get(), CLONE_NEWNS) == 0 && ::fchdir(root.get()) == 0 && ::chroot(".") == 0 &&
                         ::mount("flashroll-unanswered", path.c_str(), "fuse", MS_NOSUID | MS_NODEV,
                                 options.c_str()) == 0;
    ::_exit(mounted ? 0 : 1);
  }
  int status = 0;
  if (child < 0 || ::waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return UniqueFd();
  }
  return dev;
}

// A read that hangs (a file on a filesystem that never answers) is killed
// at the timeout, and meanwhile an exec, the sandbox's TTL expiry and the
// next sandbox's go ahead.
TEST_F(FileAccessTest, AHangingReadTimesOutAndNothingWaitsForIt) {
  manager_.reset();
  Manager::Options options;
  options.file_timeout = seconds(4);
  auto opened = Manager::Open(options);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  manager_ = std::move(*opened);
  SandboxSpec first, second;
  first.ttl = milliseconds(1500);
  second.ttl = milliseconds(2000);
  const auto created = Clock::now();
  const std::string id = CreateOrDie(first);
  CreateOrDie(second);
  ASSERT_EQ(Sh(id, "mkdir /tmp/hang").exit_code, 0);
  UniqueFd fuse = MountUnansweredFuse(manager_->Info(id)->init_pid, "/tmp/hang");
  ASSERT_TRUE(fuse.valid()) << "could not mount FUSE in the sandbox";
  auto abort_fuse = [&fuse] {
    fuse.reset();
    return std::vector<UniqueFd>();
  };

  int ends[2];
  ASSERT_EQ(::pipe2(ends, O_CLOEXEC), 0);
  UniqueFd pipe_read(ends[0]), pipe_write(ends[1]);

  const auto asked = Clock::now();
  auto read = std::async(std::launch::async, [&] { return manager_->GetFile(id, "/tmp/hang/answer").status(); });
  std::this_thread::sleep_for(milliseconds(100));
  // The helper, now waiting, holds no copy of the manager's descriptors.
  pipe_write.reset();
  pollfd hung_up {pipe_read.get(), POLLIN, 0};
  EXPECT_EQ(::poll(&hung_up, 1, 500), 1) << "a pipe's write end lives on in the helper";
  const ExecResult alive =
      AnswerWithinASecond<ExecResult>("exec during the read", [&] { return Sh(id, "echo alive"); }, abort_fuse);
  EXPECT_EQ(alive.stdout_data, "alive\n");
  while (!manager_->List().empty() && Clock::now() - created < milliseconds(3500)) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_TRUE(manager_->List().empty()) << "TTL expiry waited for the read";

  if (read.wait_for(seconds(8)) != std::future_status::ready) {
    ADD_FAILURE() << "the read did not time out";
    abort_fuse();
  }
  const Status status = read.get();
  EXPECT_EQ(status.code(), Code::kDeadlineExceeded) << status.ToString();
  EXPECT_NE(status.message().find("path /tmp/hang/answer: the file operation did not finish within 4000 ms"),
            std::string::npos)
      << status.ToString();
  EXPECT_GE(Clock::now() - asked, milliseconds(3900));
}

}  // namespace
}  // namespace flashroll::sandbox
