// Workspace disks (sandbox/workspace_disks.h): each workspace a sandbox
// binds read-write is an ext4 filesystem of its own, so what it writes there
// is bounded on disk and in inodes, not by the host filesystem's free space,
// and not in memory. Needs root (skips otherwise).
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "common/http.h"
#include "sandbox/api/server.h"
#include "sandbox/workspace_disks.h"
#include "tests/sandbox/sandbox_fixture.h"

namespace flashroll::sandbox {
namespace {

namespace fs = std::filesystem;
constexpr char kToken[] = "workspace-token-0123456789";

dev_t DeviceOf(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_dev : 0;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Writes `mib` MiB to `path` in 1 MiB writes; prints "ok" or the errno name
// of the write that failed and how many MiB went before it.
std::string WriteProbe(const std::string& path, int mib) {
  return "python3 -c \"\nimport errno, os\nfd = os.open('" + path + "', os.O_WRONLY | os.O_CREAT, 0o644)\nblock = bytes(1 << 20)\n"
         "for i in range(" + std::to_string(mib) + "):\n    try:\n        os.write(fd, block)\n"
         "    except OSError as e:\n        print(errno.errorcode[e.errno], i)\n        raise SystemExit\n"
         "os.fsync(fd)\nprint('ok')\n\"";
}

class WorkspaceDiskTest : public SandboxFixture {
 protected:
  void SetUp() override {
    SandboxFixture::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    char dir[] = "/tmp/flashroll-workspaces-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
    root_ = dir_ + "/ws";
    images_ = dir_ + "/images";
    ASSERT_EQ(::mkdir(root_.c_str(), 0755), 0);
  }
  void TearDown() override {
    if (dir_.empty()) return;
    manager_.reset();  // its sandboxes, which bind the workspaces
    // Whatever a test left mounted, then its files.
    for (const auto& entry : fs::directory_iterator(root_)) {
      ::umount2(entry.path().c_str(), MNT_DETACH | UMOUNT_NOFOLLOW);
    }
    fs::remove_all(dir_);
  }

  std::unique_ptr<WorkspaceDisks> OpenOrDie() {
    auto disks = WorkspaceDisks::Open(root_, images_);
    EXPECT_TRUE(disks.ok()) << disks.status().ToString();
    return disks.ok() ? std::move(*disks) : nullptr;
  }

  std::string dir_, root_, images_;
};

TEST_F(WorkspaceDiskTest, AWorkspaceIsAFilesystemOfItsOwnSizeUntilRemoved) {
  auto disks = OpenOrDie();
  ASSERT_NE(disks, nullptr);
  EXPECT_TRUE(disks->List().empty());
  auto made = disks->Create("job1", 64ull << 20);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_EQ(made->path, root_ + "/job1");
  EXPECT_EQ(made->device.rfind("/dev/loop", 0), 0u) << made->device;
  // ext4 keeps some of it for its journal and tables.
  EXPECT_GT(made->bytes, 48ull << 20);
  EXPECT_LE(made->bytes, 64ull << 20);
  EXPECT_GT(made->inodes, 0u);
  const dev_t device = DeviceOf(root_ + "/job1");
  EXPECT_NE(device, DeviceOf(root_));
  EXPECT_TRUE(disks->Holds("job1", device));
  EXPECT_FALSE(disks->Holds("job1", DeviceOf(root_)));
  EXPECT_FALSE(disks->Holds("job2", device));
  EXPECT_TRUE(fs::exists(images_ + "/job1.img"));
  ASSERT_EQ(disks->List().size(), 1u);
  EXPECT_EQ(disks->List()[0].name, "job1");

  EXPECT_EQ(disks->Create("job1", 64ull << 20).status().code(), Code::kAlreadyExists);
  ASSERT_EQ(::mkdir((root_ + "/plain").c_str(), 0755), 0);
  EXPECT_EQ(disks->Create("plain", 64ull << 20).status().code(), Code::kAlreadyExists);
  for (const char* bad : {"", "Job", ".hidden", "a/b", "..", "-x"}) {
    const Status refused = disks->Create(bad, 64ull << 20).status();
    EXPECT_EQ(refused.code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(refused.message().find("must be [a-z0-9][a-z0-9._-]*"), std::string::npos) << refused.ToString();
  }
  EXPECT_EQ(disks->Create(std::string(65, 'a'), 64ull << 20).status().code(), Code::kInvalidArgument);
  const Status small = disks->Create("small", 1ull << 20).status();
  EXPECT_EQ(small.code(), Code::kInvalidArgument);
  EXPECT_NE(small.message().find("at least 16M"), std::string::npos) << small.ToString();

  ASSERT_TRUE(disks->Remove("job1").ok());
  EXPECT_FALSE(fs::exists(root_ + "/job1"));
  EXPECT_FALSE(fs::exists(images_ + "/job1.img"));
  EXPECT_FALSE(disks->Holds("job1", device));
  EXPECT_EQ(disks->Remove("job1").code(), Code::kNotFound);
  EXPECT_TRUE(disks->List().empty());
}

// A manager that starts again adopts the workspaces still mounted and
// mounts those that are not (after a reboot): nothing written is lost.
TEST_F(WorkspaceDiskTest, ANewManagerAdoptsMountedWorkspacesAndRemountsTheOthers) {
  auto disks = OpenOrDie();
  ASSERT_NE(disks, nullptr);
  ASSERT_TRUE(disks->Create("kept", 32ull << 20).ok());
  std::ofstream(root_ + "/kept/notes") << "written before";
  const dev_t device = DeviceOf(root_ + "/kept");
  disks.reset();

  auto adopted = OpenOrDie();
  ASSERT_NE(adopted, nullptr);
  ASSERT_TRUE(adopted->Get("kept").ok());
  EXPECT_TRUE(adopted->Holds("kept", device));
  EXPECT_EQ(DeviceOf(root_ + "/kept"), device);  // the same mount, not a second one on it
  adopted.reset();

  ASSERT_EQ(::umount2((root_ + "/kept").c_str(), 0), 0);
  EXPECT_FALSE(fs::exists(root_ + "/kept/notes"));
  auto remounted = OpenOrDie();
  ASSERT_NE(remounted, nullptr);
  EXPECT_NE(DeviceOf(root_ + "/kept"), DeviceOf(root_));
  EXPECT_TRUE(remounted->Holds("kept", DeviceOf(root_ + "/kept")));
  EXPECT_EQ(ReadAll(root_ + "/kept/notes"), "written before");
  EXPECT_TRUE(remounted->Remove("kept").ok());
}

// Something else mounted where a workspace goes is not taken for it.
TEST_F(WorkspaceDiskTest, AMountOfSomethingElseAtAWorkspaceIsRefused) {
  auto disks = OpenOrDie();
  ASSERT_NE(disks, nullptr);
  ASSERT_TRUE(disks->Create("taken", 32ull << 20).ok());
  disks.reset();
  ASSERT_EQ(::umount2((root_ + "/taken").c_str(), 0), 0);
  ASSERT_EQ(::mount("tmpfs", (root_ + "/taken").c_str(), "tmpfs", 0, "size=1m"), 0);
  auto refused = WorkspaceDisks::Open(root_, images_);
  EXPECT_EQ(refused.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("is a mount of something else than " + images_ + "/taken.img"),
            std::string::npos)
      << refused.status().ToString();
}

// The attacker's steps through the node API: a sandbox of 64M memory whose
// rw path lies in a 256M workspace writes 160M there without being
// OOM-killed, then fails with ENOSPC at the workspace's size: the host
// filesystem under the workspace root is never filled. A plain directory
// under the root, or one made where a removed workspace was, is refused.
// Without workspace disks (workspace_disks: false, the old behaviour) the
// second write went on to 360M on the host's filesystem.
TEST_F(WorkspaceDiskTest, AnRwBindIsBoundedByItsWorkspaceDiskThroughTheApi) {
  api::NodePolicy policy;
  policy.workspace_root = root_;
  policy.workspace_disks = OpenOrDie();
  ASSERT_NE(policy.workspace_disks, nullptr);
  policy.max.disk_bytes = 1ull << 30;
  policy.max_workspaces = 2;
  HttpServerOptions options;
  options.bearer_token = kToken;
  api::SandboxServer server(manager_.get(), policy, options);
  ASSERT_TRUE(server.Start().ok());
  HttpClientOptions client_options;
  client_options.base_url = server.base_url();
  client_options.bearer_token = kToken;
  auto client = HttpClient::Create(client_options);
  ASSERT_TRUE(client.ok());
  const auto post = [&](const std::string& path, const Json& body) {
    auto reply = client->Send(HttpMethod::kPost, path, body.dump(), "application/json");
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
    return reply.ok() ? *reply : HttpResponse{};
  };

  HttpResponse made = post("/v1/workspaces", Json{{"name", "w"}, {"disk", "256M"}});
  ASSERT_EQ(made.status, 201) << made.body;
  EXPECT_EQ(ParseJson(made.body)->value("path", ""), root_ + "/w");
  EXPECT_EQ(post("/v1/workspaces", Json{{"name", "w"}, {"disk", "256M"}}).status, 409);
  EXPECT_EQ(post("/v1/workspaces", Json{{"name", "big"}, {"disk", "2G"}}).status, 403);
  ASSERT_EQ(post("/v1/workspaces", Json{{"name", "second"}, {"disk", "16M"}}).status, 201);
  EXPECT_EQ(post("/v1/workspaces", Json{{"name", "third"}, {"disk", "16M"}}).status, 429);
  auto listed = client->Send(HttpMethod::kGet, "/v1/workspaces", "", "");
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ((*ParseJson(listed->body))["workspaces"].size(), 2u) << listed->body;

  HttpResponse sandbox = post("/v1/sandboxes", Json{{"memory", "64M"}, {"rw_paths", {root_ + "/w"}}});
  ASSERT_EQ(sandbox.status, 201) << sandbox.body;
  auto id = server.ManagerId(ParseJson(sandbox.body)->value("id", ""));
  ASSERT_TRUE(id.ok());
  ExecResult first = Sh(*id, WriteProbe(root_ + "/w/first", 160), std::chrono::seconds(60));
  EXPECT_EQ(first.stdout_data, "ok\n") << first.stderr_data;
  EXPECT_FALSE(first.oom_killed);
  ExecResult second = Sh(*id, WriteProbe(root_ + "/w/second", 200), std::chrono::seconds(60));
  std::istringstream words(second.stdout_data);
  std::string error;
  int written = 0;
  words >> error >> written;
  EXPECT_EQ(error, "ENOSPC") << second.stdout_data << second.stderr_data;
  EXPECT_GT(160 + written, 200);
  EXPECT_LE(160 + written, 256);
  EXPECT_FALSE(second.oom_killed);
  auto shown = client->Send(HttpMethod::kGet, "/v1/workspaces/w", "", "");
  ASSERT_TRUE(shown.ok());
  EXPECT_GT(ParseJson(shown->body)->value("used", uint64_t{0}), 200ull << 20) << shown->body;

  // A directory of the root's own filesystem is no workspace.
  ASSERT_EQ(::mkdir((root_ + "/plain").c_str(), 0777), 0);
  HttpResponse plain = post("/v1/sandboxes", Json{{"rw_paths", {root_ + "/plain"}}});
  EXPECT_EQ(plain.status, 403) << plain.body;
  EXPECT_NE(plain.body.find("is not on the workspace disk " + root_ + "/plain"), std::string::npos) << plain.body;
  // Nor is the directory made where a removed workspace was mounted.
  auto removed = client->Send(HttpMethod::kDelete, "/v1/workspaces/second", "", "");
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(removed->status, 200) << removed->body;
  ASSERT_EQ(::mkdir((root_ + "/second").c_str(), 0777), 0);
  EXPECT_EQ(post("/v1/sandboxes", Json{{"rw_paths", {root_ + "/second"}}}).status, 403);
  // A directory inside a workspace is in it.
  ASSERT_EQ(::mkdir((root_ + "/w/sub").c_str(), 0777), 0);
  EXPECT_EQ(post("/v1/sandboxes", Json{{"rw_paths", {root_ + "/w/sub"}}}).status, 201);
  server.Stop();
}

}  // namespace
}  // namespace flashroll::sandbox
