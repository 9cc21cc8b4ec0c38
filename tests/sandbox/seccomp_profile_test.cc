// Configurable seccomp profiles: parsing errors that name the file and the
// field, compiled profiles installed in a forked child, and `sandbox run
// --seccomp` end to end.
#include "sandbox/seccomp_profile.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <seccomp.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/http.h"
#include "sandbox/api/server.h"
#include "sandbox/api/wire.h"
#include "sandbox/seccomp.h"
#include "sandbox/spec.h"
#include "tests/cli/run_flashroll.h"
#include "tests/sandbox/sandbox_fixture.h"

namespace flashroll::sandbox {
namespace {

// A temporary directory for profile files, removed with its contents.
class ProfileDir {
 public:
  ProfileDir() {
    char dir_template[] = "/tmp/flashroll-seccomp-XXXXXX";
    if (mkdtemp(dir_template) != nullptr) path_ = dir_template;
  }
  ~ProfileDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }
  // Writes `text` to the file `name` in the directory; returns its path.
  std::string Write(const std::string& name, const std::string& text) const {
    const std::string path = path_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }

 private:
  std::string path_;
};

class SeccompProfileTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.path().empty()); }
  std::string Write(const std::string& name, const std::string& text) { return dir_.Write(name, text); }
  ProfileDir dir_;
};

constexpr const char* kDenyMkdir = R"({"defaultAction": "SCMP_ACT_ALLOW", "allowUnlisted": true, "syscalls": [
    {"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1}]})";
constexpr const char* kAllowMkdir = R"({"defaultAction": "SCMP_ACT_ALLOW", "allowUnlisted": true, "syscalls": [
    {"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ALLOW"},
    {"names": ["reboot"], "action": "SCMP_ACT_ERRNO"}]})";

// Runs `probe` in a forked child under `program`; returns its exit code.
// The child ends with a raw exit_group: under AddressSanitizer _exit runs
// the leak checker first, whose system calls a deny-by-default profile
// refuses, and it then exits 1 whatever the probe said.
int RunFiltered(const SeccompProgram& program, int (*probe)()) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(100);
    if (!SeccompChild(program).ok()) _exit(101);
    syscall(SYS_exit_group, probe());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 200 + WTERMSIG(status);
}

TEST_F(SeccompProfileTest, ErrorsNameTheFileAndTheField) {
  const std::string unknown_call = Write("calls.json", R"({"syscalls": [
      {"names": ["read"], "action": "SCMP_ACT_ALLOW"},
      {"names": ["mkdir", "frobnicate"], "action": "SCMP_ACT_ERRNO"}]})");
  auto r = ReadSeccompProfile(unknown_call);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(r.status().message(), unknown_call + ": syscalls[1].names[1]: unknown system call 'frobnicate'");

  const std::string bad_action = Write("action.json", R"({"syscalls": [{"names": ["read"], "action": "NOPE"}]})");
  r = ReadSeccompProfile(bad_action);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), bad_action + ": syscalls[0].action: unknown action 'NOPE'");

  const std::string bad_op = Write("op.json", R"({"syscalls": [
      {"names": ["socket"], "action": "SCMP_ACT_ERRNO", "args": [{"index": 0, "value": 40, "op": "SCMP_CMP_XX"}]}]})");
  r = ReadSeccompProfile(bad_op);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), bad_op + ": syscalls[0].args[0].op: unknown operator 'SCMP_CMP_XX'");

  const std::string typo = Write("typo.json", R"({"defaultAction": "SCMP_ACT_ERRNO", "syscals": []})");
  r = ReadSeccompProfile(typo);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), typo + ": unknown field \"syscals\"");

  const std::string syntax = Write("syntax.json", "{\"defaultAction\": ");
  r = ReadSeccompProfile(syntax);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(syntax), std::string::npos) << r.status().message();
}

// A default that lets calls through would let through whatever a later
// kernel adds: the profile has to ask for it.
TEST_F(SeccompProfileTest, AllowingDefaultNeedsAllowUnlisted) {
  for (const std::string action : {"SCMP_ACT_ALLOW", "SCMP_ACT_LOG"}) {
    const std::string refused = Write("refused.json", R"({"defaultAction": ")" + action + R"(", "syscalls": [
        {"names": ["mkdir"], "action": "SCMP_ACT_ERRNO"}]})");
    auto r = ReadSeccompProfile(refused);
    ASSERT_FALSE(r.ok()) << action;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_EQ(r.status().message(), refused + ": defaultAction: " + action +
                                        " lets through every system call not listed, new ones too; "
                                        "set \"allowUnlisted\": true to mean it");
    const std::string no = Write("no.json", R"({"defaultAction": ")" + action + R"(", "allowUnlisted": false})");
    EXPECT_FALSE(ReadSeccompProfile(no).ok()) << action;
    const std::string yes = Write("yes.json", R"({"defaultAction": ")" + action + R"(", "allowUnlisted": true})");
    EXPECT_TRUE(ReadSeccompProfile(yes).ok()) << action;
  }
  SandboxSpec spec;
  spec.seccomp = Write("spec.json", R"({"defaultAction": "SCMP_ACT_ALLOW"})");
  EXPECT_EQ(ValidateSpec(spec).message(), "seccomp: " + spec.seccomp +
                                              ": defaultAction: SCMP_ACT_ALLOW lets through every system call "
                                              "not listed, new ones too; set \"allowUnlisted\": true to mean it");
}

// Without a defaultAction a profile is an allowlist: what it does not name
// fails with ENOSYS.
TEST_F(SeccompProfileTest, WithoutDefaultActionUnlistedCallsFailWithEnosys) {
  const std::string path = Write("list.json", R"({"syscalls": [
      {"names": ["getpid", "exit_group"], "action": "SCMP_ACT_ALLOW"}]})");
  auto profile = ReadSeccompProfile(path);
  ASSERT_TRUE(profile.ok()) << profile.status().ToString();
  EXPECT_EQ(profile->default_action, SCMP_ACT_ERRNO(ENOSYS));
  auto program = SeccompProgramFor(path);
  ASSERT_TRUE(program.ok()) << program.status().ToString();
  EXPECT_EQ(RunFiltered(**program, [] { return getpid() > 0 ? 0 : 1; }), 0);
  EXPECT_EQ(RunFiltered(**program, [] { return syscall(SYS_getppid) == -1 && errno == ENOSYS ? 0 : 1; }), 0);
  EXPECT_EQ(RunFiltered(**program, [] { return syscall(SYS_mkdir, "/", 0755) == -1 && errno == ENOSYS ? 0 : 1; }), 0);
}

// A profile that parses but that libseccomp refuses (two comparisons of one
// argument in a rule) is reported naming the file and the rule.
TEST_F(SeccompProfileTest, LibseccompRefusalNamesTheFileAndTheRule) {
  const std::string path = Write("twice.json", R"({"syscalls": [{"names": ["getpid"], "action": "SCMP_ACT_ALLOW"},
      {"names": ["mkdir"], "action": "SCMP_ACT_ALLOW", "args": [
          {"index": 1, "value": 448, "op": "SCMP_CMP_EQ"}, {"index": 1, "value": 493, "op": "SCMP_CMP_EQ"}]}]})");
  ASSERT_TRUE(ReadSeccompProfile(path).ok());
  auto program = SeccompProgramFor(path);
  ASSERT_FALSE(program.ok());
  EXPECT_EQ(program.status().message(),
            path + ": seccomp: syscalls[1] system call " + std::to_string(SYS_mkdir) + ": Invalid argument");
}

TEST_F(SeccompProfileTest, SpecValidationReportsTheProfile) {
  SandboxSpec spec;
  spec.seccomp = "relative.json";
  EXPECT_EQ(ValidateSpec(spec).code(), Code::kInvalidArgument);
  spec.seccomp = Write("bad.json", R"({"defaultAction": "SCMP_ACT_ALLOW", "defaultErrnoRet": -1})");
  const Status s = ValidateSpec(spec);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "seccomp: " + spec.seccomp + ": defaultErrnoRet: must be in 0..4095");
  spec.seccomp = Write("good.json", kDenyMkdir);
  EXPECT_TRUE(ValidateSpec(spec).ok());
  spec.seccomp = "default";
  EXPECT_TRUE(ValidateSpec(spec).ok());
}

TEST_F(SeccompProfileTest, CustomProfileDeniesMkdirWithEperm) {
  auto program = SeccompProgramFor(Write("deny.json", kDenyMkdir));
  ASSERT_TRUE(program.ok()) << program.status().ToString();
  static std::string dir;
  dir = dir_.path() + "/made";
  EXPECT_EQ(RunFiltered(**program, [] { return mkdir(dir.c_str(), 0755) == -1 && errno == EPERM ? 0 : 1; }), 0);
  EXPECT_EQ(RunFiltered(**program, [] { return getpid() > 0 ? 0 : 1; }), 0);
  struct stat st {};
  EXPECT_NE(stat(dir.c_str(), &st), 0);

  auto allow = SeccompProgramFor(Write("allow.json", kAllowMkdir));
  ASSERT_TRUE(allow.ok()) << allow.status().ToString();
  EXPECT_EQ(RunFiltered(**allow, [] { return mkdir(dir.c_str(), 0755) == 0 ? 0 : 1; }), 0);
  EXPECT_EQ(stat(dir.c_str(), &st), 0);
}

TEST_F(SeccompProfileTest, ArgumentConditionsAndDefaultErrno) {
  // mkdir fails with EACCES unless its mode is 0700.
  auto program = SeccompProgramFor(Write("args.json", R"({"defaultAction": "SCMP_ACT_ALLOW", "allowUnlisted": true,
      "syscalls": [
      {"names": ["mkdir"], "action": "SCMP_ACT_ERRNO", "errnoRet": 13,
       "args": [{"index": 1, "value": 448, "op": "SCMP_CMP_NE"}]}]})"));
  ASSERT_TRUE(program.ok()) << program.status().ToString();
  static std::string dir;
  dir = dir_.path() + "/cond";
  EXPECT_EQ(RunFiltered(**program, [] { return syscall(SYS_mkdir, dir.c_str(), 0755) == -1 && errno == EACCES ? 0 : 1; }),
            0);
  EXPECT_EQ(RunFiltered(**program, [] { return syscall(SYS_mkdir, dir.c_str(), 0700) == 0 ? 0 : 1; }), 0);
}

TEST_F(SeccompProfileTest, CachesByPathAndModificationTime) {
  const std::string path = Write("cached.json", kDenyMkdir);
  auto a = SeccompProgramFor(path);
  auto b = SeccompProgramFor(path);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  Write("cached.json", kAllowMkdir);
  struct timespec times[2] = {{0, UTIME_OMIT}, {12345, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  auto c = SeccompProgramFor(path);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(*a, *c);
  const auto same = [](const sock_filter& x, const sock_filter& y) {
    return x.code == y.code && x.k == y.k && x.jt == y.jt && x.jf == y.jf;
  };
  EXPECT_FALSE(std::equal((*a)->instructions.begin(), (*a)->instructions.end(), (*c)->instructions.begin(),
                          (*c)->instructions.end(), same));
}

TEST_F(SeccompProfileTest, HttpSpecField) {
  const std::string good = Write("good.json", kDenyMkdir);
  const Json body = {{"seccomp", good}};
  auto spec = api::SpecFromJson(JsonView(body, "body"));
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->seccomp, good);
  const Json wire = api::SpecToJson(*spec);
  auto back = api::SpecFromJson(JsonView(wire, "body"));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->seccomp, good);
  const Json none = Json::object();
  EXPECT_EQ(api::SpecFromJson(JsonView(none, "body"))->seccomp, "default");

  const std::string bad = Write("bad.json", R"({"syscalls": [
      {"names": ["mkdir"], "action": "SCMP_ACT_ERRNO", "errnoRet": "EPERM"}]})");
  const Json bad_body = {{"seccomp", bad}};
  auto rejected = api::SpecFromJson(JsonView(bad_body, "body"));
  ASSERT_FALSE(rejected.ok());
  EXPECT_EQ(rejected.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(rejected.status().message(),
            "body: seccomp: " + bad + ": syscalls[0].errnoRet: expected an integer, got string");
}

using CliResult = flashroll::testing::CommandResult;

CliResult RunCli(const std::string& args) { return flashroll::testing::RunFlashroll(args); }

TEST_F(SeccompProfileTest, SandboxRunFlagEndToEnd) {
  if (geteuid() != 0) GTEST_SKIP() << "sandbox tests need root";
  const std::string deny = Write("deny.json", kDenyMkdir);
  const std::string allow = Write("allow.json", kAllowMkdir);
  EXPECT_EQ(RunCli("sandbox run --seccomp " + deny + " -- true").exit_code, 0);
  CliResult r = RunCli("sandbox run --seccomp " + deny + " -- mkdir /tmp/x");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("Operation not permitted"), std::string::npos) << r.output;
  r = RunCli("sandbox run --seccomp " + allow + " -- sh -c 'mkdir /tmp/x && echo made'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "made\n");
  r = RunCli("sandbox run --seccomp default -- sh -c 'mkdir /tmp/x && echo made'");
  EXPECT_EQ(r.output, "made\n");
  // The default profile still blocks mount.
  r = RunCli("sandbox run --seccomp default -- mount -t tmpfs none /tmp");
  EXPECT_NE(r.exit_code, 0) << r.output;

  const std::string bad = Write("bad.json", R"({"syscalls": [{"names": ["frobnicate"], "action": "SCMP_ACT_ALLOW"}]})");
  r = RunCli("sandbox run --seccomp " + bad + " -- true");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find(bad + ": syscalls[0].names[0]: unknown system call 'frobnicate'"), std::string::npos)
      << r.output;
}

// A sandbox created through the Manager and the HTTP API.
class SeccompProfileSandboxTest : public SandboxFixture {
 protected:
  void SetUp() override {
    SandboxFixture::SetUp();
    ASSERT_FALSE(dir_.path().empty());
  }
  std::string Write(const std::string& name, const std::string& text) { return dir_.Write(name, text); }
  ProfileDir dir_;
};

TEST_F(SeccompProfileSandboxTest, ProfileAppliesInsideTheSandbox) {
  SandboxSpec spec;
  spec.seccomp = Write("deny.json", kDenyMkdir);
  const std::string denied = CreateOrDie(spec);
  ASSERT_FALSE(denied.empty());
  EXPECT_EQ(Run(denied, {"true"}).exit_code, 0);
  ExecResult r = Run(denied, {"mkdir", "/tmp/made"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.stderr_data.find("Operation not permitted"), std::string::npos) << r.stderr_data;
  EXPECT_TRUE(manager_->Destroy(denied).ok());

  spec.seccomp = Write("allow.json", kAllowMkdir);
  const std::string allowed = CreateOrDie(spec);
  ASSERT_FALSE(allowed.empty());
  EXPECT_EQ(Sh(allowed, "mkdir /tmp/made && echo made").stdout_data, "made\n");
  EXPECT_TRUE(manager_->Destroy(allowed).ok());

  // The default profile still denies mount with EPERM.
  const std::string plain = CreateOrDie();
  ASSERT_FALSE(plain.empty());
  r = Run(plain, {"mount", "-t", "tmpfs", "none", "/tmp"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(manager_->Destroy(plain).ok());
}

// Over HTTP a profile is named, never a path; a named profile that does not
// compile is a 400 naming its file and field.
TEST_F(SeccompProfileSandboxTest, BadProfileIsHttp400) {
  constexpr char kToken[] = "test-token-0123456789";
  HttpServerOptions options;
  options.bearer_token = kToken;
  options.max_body_bytes = 1 << 20;
  const std::string bad =
      Write("bad.json", R"({"syscalls": [{"names": ["read", "frobnicate"], "action": "SCMP_ACT_ALLOW"}]})");
  api::NodePolicy policy;
  policy.seccomp_profiles["bad"] = bad;
  api::SandboxServer server(manager_.get(), policy, options);
  ASSERT_TRUE(server.Start().ok());
  HttpClientOptions client_options;
  client_options.base_url = server.base_url();
  client_options.bearer_token = kToken;
  auto client = HttpClient::Create(client_options);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto reply = client->Send(HttpMethod::kPost, "/v1/sandboxes", R"({"seccomp": "bad"})", "application/json");
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->status, 400) << reply->body;
  const Status parsed = StatusFromHttpReply(reply->status, reply->body);
  EXPECT_EQ(parsed.code(), Code::kInvalidArgument);
  EXPECT_NE(parsed.message().find(bad + ": syscalls[0].names[1]: unknown system call 'frobnicate'"),
            std::string::npos)
      << parsed.ToString();
  reply = client->Send(HttpMethod::kPost, "/v1/sandboxes", DumpJson(Json{{"seccomp", bad}}), "application/json");
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->status, 403) << reply->body;
  EXPECT_TRUE(manager_->List().empty());
  server.Stop();
}

}  // namespace
}  // namespace flashroll::sandbox
