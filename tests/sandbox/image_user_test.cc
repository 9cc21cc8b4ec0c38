// An image's own exec defaults (issue 26 item 3, "configurable per image"):
// the OCI image config's User and WorkingDir are who runs an exec and where,
// unless the exec or the spec names its own, for an OCI layout given as the
// image (Manager, `sandbox run`) and for an image imported into the store
// and served by name over the node API. Real layouts from
// oci_layout_builder.h; the sandbox tests need root (skip otherwise).
#include <archive_entry.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/http.h"
#include "sandbox/api/server.h"
#include "sandbox/image_store.h"
#include "sandbox/oci_image.h"
#include "sandbox/oci_layout.h"
#include "tests/cli/run_flashroll.h"
#include "tests/sandbox/oci_layout_builder.h"
#include "tests/sandbox/sandbox_fixture.h"

namespace flashroll::sandbox {
namespace {

namespace fs = std::filesystem;
using namespace oci_testing;

// busybox, a user "app" (1234, primary group 2345 "staff") and its
// working directory /srv/app, owned by it.
std::vector<Layer> AppLayers() {
  const std::string busybox = ReadFile("/bin/busybox");
  EXPECT_FALSE(busybox.empty()) << "/bin/busybox (Debian's busybox-static) is needed";
  std::vector<TarEntry> entries = {
      {"bin/", AE_IFDIR, "", 0755, ""},
      {"bin/busybox", AE_IFREG, busybox, 0755, ""},
      {"bin/sh", AE_IFLNK, "busybox", 0777, ""},
      {"bin/id", AE_IFLNK, "busybox", 0777, ""},
      {"bin/pwd", AE_IFLNK, "busybox", 0777, ""},
      {"etc/", AE_IFDIR, "", 0755, ""},
      {"etc/passwd", AE_IFREG, "root:x:0:0:root:/root:/bin/sh\napp:x:1234:2345::/srv/app:/bin/sh\n", 0644, ""},
      {"etc/group", AE_IFREG, "root:x:0:\nstaff:x:2345:\nextra:x:3456:app\n", 0644, ""},
      {"srv/", AE_IFDIR, "", 0755, ""},
      {"tmp/", AE_IFDIR, "", 01777, ""},
  };
  TarEntry home{"srv/app/", AE_IFDIR, "", 0700, ""};
  home.uid = 1234;
  home.gid = 2345;
  entries.push_back(home);
  return {{MakeTar(entries), kTar}};
}

const Json kAppConfig = {{"User", "app"}, {"WorkingDir", "/srv/app"}, {"Cmd", {"/bin/sh"}}};

// Reads what the layout's config says, as a create would.
Result<ImageDefaults> DefaultsOf(const LayoutBuilder& layout) { return OciImageDefaults(layout.dir(), ""); }

TEST(OciImageDefaultsTest, UserAndWorkingDirAreReadFromTheConfig) {
  LayoutBuilder layout;
  layout.Write({{MakeTar({{"a", AE_IFREG, "a", 0644, ""}}), kTar}}, {{"User", "1000:1001"}, {"WorkingDir", "/w"}});
  auto defaults = DefaultsOf(layout);
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_EQ(defaults->user, "1000");
  EXPECT_EQ(defaults->group, "1001");
  EXPECT_EQ(defaults->workdir, "/w");

  // No config object, or one without the fields: no defaults.
  for (const Json& config : {Json(), Json::object(), Json{{"Env", {"A=1"}}}}) {
    LayoutBuilder bare;
    bare.Write({{MakeTar({{"a", AE_IFREG, "a", 0644, ""}}), kTar}}, config);
    auto none = DefaultsOf(bare);
    ASSERT_TRUE(none.ok()) << config.dump() << ": " << none.status().ToString();
    EXPECT_EQ(none->user, "");
    EXPECT_EQ(none->group, "");
    EXPECT_EQ(none->workdir, "");
  }
}

TEST(OciImageDefaultsTest, BadFieldsAreNamedWithTheirBlob) {
  struct Case {
    Json config;
    std::string field;
  };
  const std::vector<Case> cases = {
      {{{"User", "a:b:c"}}, "config.User"},
      {{{"User", "app:"}}, "config.User"},
      {{{"User", 7}}, "config.User"},
      {{{"WorkingDir", "srv/app"}}, "config.WorkingDir"},
      {{{"WorkingDir", std::string("/a\nb")}}, "config.WorkingDir"},
      {Json("not an object"), "config"},
  };
  for (const Case& c : cases) {
    LayoutBuilder layout;
    layout.Write({{MakeTar({{"a", AE_IFREG, "a", 0644, ""}}), kTar}}, c.config);
    auto defaults = DefaultsOf(layout);
    ASSERT_FALSE(defaults.ok()) << c.config.dump();
    EXPECT_EQ(defaults.status().code(), Code::kInvalidArgument);
    const std::string& message = defaults.status().message();
    EXPECT_EQ(message.rfind("blobs/sha256/", 0), 0u) << message;
    EXPECT_NE(message.find(": " + c.field), std::string::npos) << c.config.dump() << ": " << message;
  }
}

TEST(OciImageDefaultsTest, ATamperedConfigIsRefused) {
  LayoutBuilder layout;
  layout.Write({{MakeTar({{"a", AE_IFREG, "a", 0644, ""}}), kTar}}, {{"User", "app"}});
  // Rewrite the config blob in place to name root: its digest no longer matches.
  for (const auto& entry : fs::directory_iterator(layout.dir() + "/blobs/sha256")) {
    std::string text = ReadFile(entry.path());
    const size_t at = text.find("\"User\":\"app\"");
    if (at == std::string::npos) continue;
    text.replace(at, 12, "\"User\":\"0ap\"");
    WriteFile(entry.path(), text);
  }
  auto defaults = DefaultsOf(layout);
  ASSERT_FALSE(defaults.ok());
  EXPECT_NE(defaults.status().message().find("digest mismatch"), std::string::npos) << defaults.status().ToString();
}

class ImageUserSandboxTest : public SandboxFixture {
 protected:
  void TearDown() override {
    for (const std::string& hex : unpacked_) fs::remove_all(std::string(kOciImageCacheDir) + "/" + hex);
  }

  std::string Layout(LayoutBuilder* layout) {
    unpacked_.push_back(layout->Write(AppLayers(), kAppConfig));
    return layout->dir();
  }

  std::vector<std::string> unpacked_;
};

TEST_F(ImageUserSandboxTest, AnExecRunsAsTheImagesUserInItsWorkingDir) {
  LayoutBuilder layout;
  SandboxSpec spec;
  ASSERT_TRUE(ParseImage(Layout(&layout), &spec).ok());
  const std::string id = CreateOrDie(spec);
  ASSERT_FALSE(id.empty());
  const std::string probe = "id -u; id -g; id -G; pwd";
  ExecResult r = ShAs(id, "", "", probe, "");
  EXPECT_EQ(r.stdout_data, "1234\n2345\n2345 3456\n/srv/app\n") << r.stderr_data;
  // An explicit user (or group alone) and cwd win over the image's.
  r = ShAs(id, "root", "", probe, "/");
  EXPECT_EQ(r.stdout_data, "0\n0\n0\n/\n") << r.stderr_data;
  r = ShAs(id, "", "3456", "id -u; id -g; pwd", "/tmp");
  EXPECT_EQ(r.stdout_data, "0\n3456\n/tmp\n") << r.stderr_data;
  ASSERT_TRUE(manager_->Destroy(id).ok());

  // The spec's own user and workdir win over the image's too.
  spec.user = "0";
  spec.workdir = "/tmp";
  const std::string root_id = CreateOrDie(spec);
  ASSERT_FALSE(root_id.empty());
  r = ShAs(root_id, "", "", "id -u; pwd", "");
  EXPECT_EQ(r.stdout_data, "0\n/tmp\n") << r.stderr_data;
  ASSERT_TRUE(manager_->Destroy(root_id).ok());
}

TEST_F(ImageUserSandboxTest, SandboxRunTakesTheImagesUserUnlessToldOtherwise) {
  LayoutBuilder layout;
  const std::string dir = Layout(&layout);
  auto cli = flashroll::testing::RunFlashroll("sandbox run --image " + dir + " -- /bin/sh -c 'id -u; pwd'");
  EXPECT_EQ(cli.exit_code, 0) << cli.output;
  EXPECT_NE(cli.output.find("1234\n/srv/app\n"), std::string::npos) << cli.output;
  cli = flashroll::testing::RunFlashroll("sandbox run --image " + dir + " --user 0 -- /bin/sh -c 'id -u'");
  EXPECT_EQ(cli.exit_code, 0) << cli.output;
  EXPECT_NE(cli.output.find("0\n"), std::string::npos) << cli.output;
  EXPECT_EQ(cli.output.find("1234"), std::string::npos) << cli.output;
}

TEST_F(ImageUserSandboxTest, AStoredImageServedByNameKeepsItsUser) {
  char tmp[] = "/tmp/flashroll-image-user-XXXXXX";
  ASSERT_NE(::mkdtemp(tmp), nullptr);
  const std::string store = std::string(tmp) + "/store";
  {
    LayoutBuilder layout;
    layout.Write(AppLayers(), kAppConfig);
    ASSERT_TRUE(ImportImage(store, layout.dir(), "app").ok());
  }  // the layout is gone: the store kept what it needs
  fs::create_directories(std::string(tmp) + "/plain/bin");
  ASSERT_TRUE(ImportImage(store, std::string(tmp) + "/plain", "copied").ok());
  auto defaults = StoredImageDefaults(store, "app");
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_EQ(defaults->user, "app");
  EXPECT_EQ(defaults->workdir, "/srv/app");
  auto none = StoredImageDefaults(store, "copied");
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(none->user, "");

  api::NodePolicy policy;
  auto tree = StoredImage(store, "app");
  ASSERT_TRUE(tree.ok()) << tree.status().ToString();
  policy.images["app"] = {*tree, *defaults};
  HttpServerOptions options;
  options.credentials = {{"all", "all-token", {api::kScopeCreate, api::kScopeExec, api::kScopeAdmin}}};
  api::SandboxServer server(manager_.get(), policy, options);
  ASSERT_TRUE(server.Start().ok());
  HttpClientOptions client_options;
  client_options.base_url = server.base_url();
  client_options.bearer_token = "all-token";
  auto client = HttpClient::Create(client_options);
  ASSERT_TRUE(client.ok());
  auto exec = [&](const std::string& id, Json body) {
    body["cmd"] = {"/bin/sh", "-c", "id -u; pwd"};
    auto reply = client->PostJson("/v1/sandboxes/" + id + "/exec", body);
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
    return reply.ok() ? reply->value("stdout", "") : std::string();
  };
  auto create = [&](const Json& body) {
    auto reply = client->PostJson("/v1/sandboxes", body);
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
    return reply.ok() ? reply->value("id", "") : std::string();
  };
  const std::string id = create({{"image", "app"}});
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(exec(id, Json::object()), "1234\n/srv/app\n");
  EXPECT_EQ(exec(id, {{"user", "0"}, {"cwd", "/"}}), "0\n/\n");
  const std::string as_root = create({{"image", "app"}, {"user", "root"}, {"workdir", "/tmp"}});
  ASSERT_FALSE(as_root.empty());
  EXPECT_EQ(exec(as_root, Json::object()), "0\n/tmp\n");
  server.Stop();
  for (const std::string& sandbox : manager_->List()) (void)manager_->Destroy(sandbox);
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace flashroll::sandbox
