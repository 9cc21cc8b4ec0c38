// `flashroll sandboxd --config` and `flashroll image import` end to end: a
// confined node over TLS with scoped tokens, and the refusals at start.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/http.h"
#include "sandbox/api/client.h"
#include "tests/cli/run_flashroll.h"
#include "tests/sandbox/sandbox_fixture.h"

namespace flashroll::sandbox::api {
namespace {

namespace fs = std::filesystem;
using flashroll::testing::RunFlashroll;

class SandboxdBinaryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/flashroll-sandboxd-bin-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    ::chmod(path.c_str(), 0600);
    return path;
  }

  std::string dir_;
};

TEST_F(SandboxdBinaryTest, RefusesToStartOutsidePolicy) {
  const std::string token = Write("token", "secret-token");
  auto r = RunFlashroll("sandboxd --listen 0.0.0.0:0 --token-file " + token);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("a non-loopback address needs tls (cert and key) in the config, or --insecure"),
            std::string::npos)
      << r.output;

  const std::string config = Write("node.yaml", "kind: sandboxd\nlisten: 10.1.2.3:7070\ntokens:\n"
                                                "  - {name: a, file: " + token + ", scopes: [create]}\n");
  r = RunFlashroll("sandboxd --config " + config);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("needs tls"), std::string::npos) << r.output;

  r = RunFlashroll("sandboxd --config " + config + " --token-file " + token);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("exclude each other"), std::string::npos) << r.output;

  r = RunFlashroll("sandboxd --config " + Write("bad.yaml", "kind: sandboxd\ntokens: []\n"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(dir_ + "/bad.yaml:2: tokens"), std::string::npos) << r.output;

  r = RunFlashroll("sandboxd --listen 127.0.0.1:0 --token-file " + dir_ + "/none");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--token-file: open " + dir_ + "/none"), std::string::npos) << r.output;

  r = RunFlashroll("sandboxd --listen 127.0.0.1:0");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--token-file or --config is required"), std::string::npos) << r.output;
}

// A node on loopback over TLS: the runner token creates and execs, but
// may not read metrics; the ops token may.
TEST_F(SandboxdBinaryTest, ServesAConfigOverTlsWithScopedTokens) {
  if (::geteuid() != 0) GTEST_SKIP() << "sandboxd needs root";
  const std::string cert = dir_ + "/cert.pem", key = dir_ + "/key.pem";
  ASSERT_EQ(std::system(("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
                         "-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 -keyout " +
                         key + " -out " + cert + " 2>/dev/null")
                            .c_str()),
            0);
  const std::string runner = Write("runner.token", "runner-secret");
  const std::string ops = Write("ops.token", "ops-secret");
  const std::string config = Write("node.yaml", "kind: sandboxd\nlisten: 127.0.0.1:0\nnetns_pool: 0\n"
                                                "tokens:\n  - {name: runner, file: " + runner +
                                                    ", scopes: [create, exec]}\n"
                                                    "  - {name: ops, file: " + ops + ", scopes: [admin]}\n"
                                                    "tls: {cert: " + cert + ", key: " + key + "}\n");
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::execl(FLASHROLL_BIN, FLASHROLL_BIN, "sandboxd", "--config", config.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out[1]);
  std::string url;
  char c;
  while (::read(out[0], &c, 1) == 1 && c != '\n') url += c;
  ::close(out[0]);
  ASSERT_EQ(url.rfind("https://127.0.0.1:", 0), 0u) << url;

  HttpClientOptions options;
  options.base_url = url;
  options.ca_cert_file = cert;
  options.bearer_token = "runner-secret";
  auto client = HttpSandboxClient::Create(options);
  ASSERT_TRUE(client.ok());
  auto id = (*client)->Create(SandboxSpec());
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  ExecCall call;
  call.argv = {"/bin/sh", "-c", "echo hi"};
  auto result = (*client)->Exec(*id, call);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->stdout_data, "hi\n");
  EXPECT_EQ((*client)->Metrics().status().code(), Code::kPermissionDenied);
  // A host path as the image: 403 over the wire.
  SandboxSpec host_dir;
  ASSERT_TRUE(ParseImage("/", &host_dir).ok());
  EXPECT_EQ((*client)->Create(host_dir).status().code(), Code::kPermissionDenied);
  options.bearer_token = "ops-secret";
  auto admin = HttpSandboxClient::Create(options);
  ASSERT_TRUE(admin.ok());
  auto metrics = (*admin)->Metrics();
  ASSERT_TRUE(metrics.ok()) << metrics.status().ToString();
  EXPECT_NE(metrics->find("flashroll_sandboxes_live 1\n"), std::string::npos) << *metrics;
  // An admin may delete any sandbox (it drives none it does not own:
  // api_hostile_test.cc).
  EXPECT_TRUE((*admin)->Destroy(*id).ok());
  EXPECT_TRUE(CgroupDirsWithPrefix("fr-" + std::to_string(pid) + "-").empty());

  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST_F(SandboxdBinaryTest, ImageImportAddsANameOnce) {
  fs::create_directories(dir_ + "/tree/bin");
  Write("tree/bin/tool", "v1");
  const std::string store = dir_ + "/store";
  auto r = RunFlashroll("image import " + dir_ + "/tree --name tools --store " + store);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "tools\n");
  EXPECT_TRUE(fs::exists(store + "/tools/bin/tool"));
  r = RunFlashroll("image import " + dir_ + "/tree --name tools --store " + store);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("image 'tools' is already in the store"), std::string::npos) << r.output;
  r = RunFlashroll("image import / --name ../up --store " + store);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = RunFlashroll("image import " + dir_ + "/tree --store " + store);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--name is required"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace flashroll::sandbox::api
