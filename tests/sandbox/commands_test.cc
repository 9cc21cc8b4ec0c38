// `flashroll sandbox run` end to end: the exact CLI contract.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "common/json.h"
#include "sandbox/seccomp.h"
#include "tests/cli/run_flashroll.h"
#include "tests/sandbox/sandbox_fixture.h"

namespace flashroll::sandbox {
namespace {

using CliResult = flashroll::testing::CommandResult;

CliResult RunCli(const std::string& args) { return flashroll::testing::RunFlashroll(args); }

class SandboxRunCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "sandbox tests need root";
    mounts_before_ = MountCount();
  }
  void TearDown() override {
    if (geteuid() != 0) return;
    EXPECT_EQ(MountCount(), mounts_before_);
  }
  size_t mounts_before_ = 0;
};

TEST_F(SandboxRunCommandTest, PassesOutputAndExitCode) {
  CliResult r = RunCli("sandbox run -- sh -c 'echo out; echo err >&2; exit 7'");
  EXPECT_EQ(r.exit_code, 7);
  EXPECT_EQ(r.output, "out\nerr\n");
  EXPECT_EQ(RunCli("sandbox run -- /bin/true").exit_code, 0);
  EXPECT_EQ(RunCli("sandbox run --image busybox -- echo hi").output, "hi\n");
}

TEST_F(SandboxRunCommandTest, TimeoutExits124) {
  CliResult r = RunCli("sandbox run --timeout 500ms -- sleep 30");
  EXPECT_EQ(r.exit_code, 124);
}

TEST_F(SandboxRunCommandTest, MemoryKillExits137) {
  CliResult r = RunCli("sandbox run --memory 64M -- python3 -c \"b = b'x' * (512 << 20)\"");
  EXPECT_EQ(r.exit_code, 137);
}

TEST_F(SandboxRunCommandTest, LimitsAreAccepted) {
  CliResult r = RunCli("sandbox run --memory 256M --pids 64 --cpus 0.5 --timeout 10s -- sh -c 'echo ok'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "ok\n");
}

TEST_F(SandboxRunCommandTest, BadInputExits2) {
  EXPECT_EQ(RunCli("sandbox run --memory lots -- true").exit_code, 2);
  EXPECT_EQ(RunCli("sandbox run --image relative -- true").exit_code, 2);
  EXPECT_EQ(RunCli("sandbox run --allow 1.2.3.4:80 -- true").exit_code, 2);
  EXPECT_EQ(RunCli("sandbox run").exit_code, 2);
}

TEST_F(SandboxRunCommandTest, LeavesNothingBehind) {
  for (int i = 0; i < 5; ++i) ASSERT_EQ(RunCli("sandbox run -- true").exit_code, 0);
  // Names carry the manager's pid; the CLI runs exited, so nothing of theirs may remain.
  for (const auto& dir : CgroupDirsWithPrefix("fr-")) {
    const std::string name = dir.substr(dir.rfind('/') + 1);
    EXPECT_TRUE(OwnerAlive(name)) << "leftover " << dir;
  }
}

// The BPF export is the filter every sandbox gets, byte for byte; the OCI
// export, compiled by our own profile loader, is the same program.
TEST(SandboxSeccompExportTest, WritesTheDefaultFilter) {
  const std::string dir = ::testing::TempDir();
  const std::string bpf = dir + "/fr-seccomp.bpf", oci = dir + "/fr-seccomp.json";
  ASSERT_EQ(RunCli("sandbox seccomp-export " + bpf).exit_code, 0);
  ASSERT_EQ(RunCli("sandbox seccomp-export --format oci " + oci).exit_code, 0);
  auto program = DefaultSeccompProgram();
  ASSERT_TRUE(program.ok()) << program.status().ToString();
  std::ifstream in(bpf, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto& instructions = (*program)->instructions;
  ASSERT_EQ(bytes.size(), instructions.size() * sizeof(sock_filter));
  EXPECT_EQ(std::memcmp(bytes.data(), instructions.data(), bytes.size()), 0);
  // Our loader compiles for the native architecture and knows no
  // "architectures" field; the rest is read as it is.
  auto json = ReadJsonFile(oci);
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  EXPECT_EQ((*json)["architectures"].size(), 1u);
  json->erase("architectures");
  ASSERT_TRUE(WriteJsonFileAtomic(oci, *json).ok());
  auto from_oci = SeccompProgramFor(oci);
  ASSERT_TRUE(from_oci.ok()) << from_oci.status().ToString();
  ASSERT_EQ((*from_oci)->instructions.size(), instructions.size());
  EXPECT_EQ(std::memcmp((*from_oci)->instructions.data(), instructions.data(), bytes.size()), 0);
  EXPECT_NE(RunCli("sandbox seccomp-export --format xml " + bpf).exit_code, 0);
  std::remove(bpf.c_str());
  std::remove(oci.c_str());
}

// A one-shot run starts no thread: no netns pool filling namespaces for
// nobody, no crash watcher, no TTL thread. Counted while the command runs.
TEST_F(SandboxRunCommandTest, StartsNoThreads) {
  int out[2];
  ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    execl(FLASHROLL_BIN, FLASHROLL_BIN, "sandbox", "run", "--", "sh", "-c", "echo ready; sleep 2", nullptr);
    _exit(127);
  }
  close(out[1]);
  std::array<char, 16> ready {};
  ASSERT_EQ(read(out[0], ready.data(), ready.size()), 6);
  EXPECT_EQ(std::string(ready.data(), 6), "ready\n");
  size_t threads = 0;
  for ([[maybe_unused]] const auto& entry :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
    ++threads;
  }
  EXPECT_EQ(threads, 1u);
  close(out[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace flashroll::sandbox
