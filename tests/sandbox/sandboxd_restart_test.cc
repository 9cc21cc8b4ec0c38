// A sandboxd restart keeps the sandboxes (issue 27, item 4): with
// keep_sandboxes, a sandboxd that is SIGKILLed or stopped leaves them
// running, and the next one adopts them with their public ids, owners and
// idempotency keys. The steps are the `flashroll sandboxd` binary's, driven
// over HTTP by two clients. Needs root (skips otherwise).
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "sandbox/api/client.h"

namespace flashroll::sandbox::api {
namespace {

namespace fs = std::filesystem;

class SandboxdRestartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "sandboxd needs root";
    char dir[] = "/tmp/flashroll-restart-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
    for (const char* name : {"alice", "bob"}) {
      const std::string path = dir_ + "/" + name + ".token";
      std::ofstream(path) << name << "-secret-0123456789";
      ::chmod(path.c_str(), 0600);
    }
    std::ofstream(dir_ + "/node.yaml") << "kind: sandboxd\nlisten: 127.0.0.1:0\nkeep_sandboxes: true\n"
                                       << "orphan_timeout: 2m\ntokens:\n"
                                       << "  - {name: alice, file: " << dir_ << "/alice.token, scopes: [create, exec, files]}\n"
                                       << "  - {name: bob, file: " << dir_ << "/bob.token, scopes: [create, exec, files]}\n";
  }
  void TearDown() override {
    if (pid_ > 0) Stop(SIGKILL);
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // Starts sandboxd; its base URL.
  std::string Start() {
    int out[2];
    EXPECT_EQ(::pipe(out), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], 1);
      const std::string config = dir_ + "/node.yaml";
      ::execl(FLASHROLL_BIN, FLASHROLL_BIN, "sandboxd", "--config", config.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(out[1]);
    std::string url;
    char c;
    while (::read(out[0], &c, 1) == 1 && c != '\n') url += c;
    ::close(out[0]);
    return url;
  }
  int Stop(int signal) {
    ::kill(pid_, signal);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

  std::unique_ptr<HttpSandboxClient> Client(const std::string& url, const std::string& who) {
    HttpClientOptions options;
    options.base_url = url;
    options.bearer_token = who + "-secret-0123456789";
    auto client = HttpSandboxClient::Create(options);
    EXPECT_TRUE(client.ok());
    return client.ok() ? std::move(*client) : nullptr;
  }

  std::string dir_;
  pid_t pid_ = -1;
};

ExecCall Shell(const std::string& script) {
  ExecCall call;
  call.argv = {"/bin/sh", "-c", script};
  call.timeout = std::chrono::milliseconds(20000);
  return call;
}

TEST_F(SandboxdRestartTest, ASigkilledOrStoppedSandboxdsSandboxesAreTheNextOnes) {
  std::string url = Start();
  ASSERT_EQ(url.rfind("http://127.0.0.1:", 0), 0u) << url;
  SandboxSpec spec;
  spec.memory_bytes = 256ull << 20;
  auto id = Client(url, "alice")->Create(spec, "job-7");
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  auto wrote = Client(url, "alice")->Exec(*id, Shell("echo state > /tmp/s; sleep 1000 >/dev/null 2>&1 </dev/null &"));
  ASSERT_TRUE(wrote.ok()) << wrote.status().ToString();
  Stop(SIGKILL);

  // The next sandboxd: the same sandbox under the same id, still its
  // owner's alone, with its files and processes.
  url = Start();
  ASSERT_EQ(url.rfind("http://127.0.0.1:", 0), 0u) << url;
  auto alice = Client(url, "alice");
  auto bob = Client(url, "bob");
  auto read = alice->Exec(*id, Shell("cat /tmp/s; pgrep -c sleep"));
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->stdout_data, "state\n1\n");
  EXPECT_EQ(bob->Exec(*id, Shell("true")).status().code(), Code::kNotFound);
  EXPECT_EQ(bob->Destroy(*id).code(), Code::kNotFound);
  // Its idempotency key still names it, for the same spec only.
  auto again = alice->Create(spec, "job-7");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(*again, *id);
  SandboxSpec other = spec;
  other.memory_bytes = 128ull << 20;
  EXPECT_EQ(alice->Create(other, "job-7").status().code(), Code::kAlreadyExists);
  EXPECT_EQ(bob->Create(spec, "job-7").status().code(), Code::kOk);  // bob's own key, another sandbox

  // Stopped (SIGTERM) rather than killed: the same.
  const int status = Stop(SIGTERM);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  url = Start();
  alice = Client(url, "alice");
  auto after = alice->Exec(*id, Shell("cat /tmp/s"));
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(after->stdout_data, "state\n");
  EXPECT_TRUE(alice->Destroy(*id).ok());
  EXPECT_EQ(alice->Exec(*id, Shell("true")).status().code(), Code::kNotFound);
  Stop(SIGKILL);
  // Bob's sandbox is still kept; the next sandboxd adopts it and ends it
  // at our request, so the test leaves nothing.
  url = Start();
  bob = Client(url, "bob");
  auto bobs = bob->Create(spec, "job-7");
  ASSERT_TRUE(bobs.ok()) << bobs.status().ToString();
  EXPECT_TRUE(bob->Destroy(*bobs).ok());
}

}  // namespace
}  // namespace flashroll::sandbox::api
