// OCI image layouts as sandbox images (sandbox/oci_image.h, oci_layout.h,
// oci_layer.h), on layouts from oci_layout_builder.h.
#include <archive.h>
#include <archive_entry.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/json.h"
#include "sandbox/image.h"
#include "sandbox/oci_image.h"
#include "tests/cli/run_flashroll.h"
#include "tests/sandbox/oci_layout_builder.h"
#include "tests/sandbox/sandbox_fixture.h"

namespace flashroll::sandbox {
namespace {

namespace fs = std::filesystem;

using namespace oci_testing;

// The test image: busybox with a shell, a greeting, and a second layer that
// deletes, replaces and adds files.
std::vector<Layer> BusyboxLayers(const std::string& escape_name) {
  const std::string busybox = ReadFile("/bin/busybox");
  EXPECT_FALSE(busybox.empty()) << "/bin/busybox (Debian's busybox-static) is needed";
  std::vector<TarEntry> base = {
      {"bin/", AE_IFDIR, "", 0755, ""},
      {"bin/busybox", AE_IFREG, busybox, 0755, ""},
      {"bin/sh", AE_IFLNK, "busybox", 0777, ""},
      {"bin/ls", AE_IFLNK, "busybox", 0777, ""},
      {"bin/cat", AE_IFLNK, "busybox", 0777, ""},
      {"./etc/greeting", AE_IFREG, "hello from layer 1\n", 0644, ""},
      {"to-delete", AE_IFREG, "doomed\n", 0644, ""},
      {"opaque/old", AE_IFREG, "lower\n", 0644, ""},
      {"suid", AE_IFREG, "x", 04755, ""},
      {"dev/null-ish", AE_IFCHR, "", 0666, ""},
      {"hostroot", AE_IFLNK, "/", 0777, ""},
      {"tmp/", AE_IFDIR, "", 01777, ""},
  };
  std::vector<TarEntry> top = {
      {".wh.to-delete", AE_IFREG, "", 0644, ""},
      {"opaque/.wh..wh..opq", AE_IFREG, "", 0644, ""},
      {"opaque/new", AE_IFREG, "upper\n", 0644, ""},
      {"etc/added", AE_IFREG, "new in layer 2\n", 0600, ""},
      {"etc/greeting-link", AE_IFREG, "", 0644, "etc/greeting"},
      // Through the symlink "hostroot" -> "/": must land in the image's root.
      {"hostroot/" + escape_name, AE_IFREG, "confined\n", 0644, ""},
  };
  return {{MakeTar(base), kTar}, {MakeTar(top, ARCHIVE_FILTER_GZIP), kTarGzip}};
}

std::string RandomName(const std::string& prefix) {
  std::random_device rd;
  return prefix + std::to_string(rd());
}

// Entries of the cache directory whose names contain `text`.
std::vector<std::string> CacheEntriesWith(const std::string& cache, const std::string& text) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(cache, ec)) {
    if (entry.path().filename().string().find(text) != std::string::npos) found.push_back(entry.path());
  }
  return found;
}

class OciImageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "OCI image tests need root (the cache under /var/lib/flashroll)";
    char dir[] = "/tmp/flashroll-oci-cache-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    options_.cache_dir = dir;
  }
  void TearDown() override {
    if (!options_.cache_dir.empty() && options_.cache_dir != kOciImageCacheDir) fs::remove_all(options_.cache_dir);
  }

  // Unpacks a one-layer image made of `entries` into the test's own cache.
  Result<std::string> UnpackOne(LayoutBuilder* layout, const std::vector<TarEntry>& entries) {
    layout->Write({{MakeTar(entries), kTar}});
    return EnsureOciImage(layout->dir(), "", options_);
  }

  OciImageOptions options_;
};

TEST_F(OciImageTest, ResolveImageUnpacksLayersWithWhiteoutsOnceIntoTheCache) {
  LayoutBuilder layout;
  const std::string escape_name = RandomName("flashroll-oci-escape-");
  const std::string manifest_hex = layout.Write(BusyboxLayers(escape_name));
  const std::string cached = std::string(kOciImageCacheDir) + "/" + manifest_hex;
  SandboxSpec spec;
  ASSERT_TRUE(ParseImage(layout.dir(), &spec).ok());

  auto image = ResolveImage(spec);
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  EXPECT_EQ(image->lower, cached);
  const std::string& root = image->lower;
  EXPECT_EQ(ReadFile(root + "/etc/greeting"), "hello from layer 1\n");
  EXPECT_EQ(ReadFile(root + "/etc/added"), "new in layer 2\n");
  EXPECT_EQ(ReadFile(root + "/bin/busybox"), ReadFile("/bin/busybox"));
  EXPECT_EQ(fs::read_symlink(root + "/bin/sh"), "busybox");
  EXPECT_FALSE(fs::exists(fs::symlink_status(root + "/to-delete")));
  EXPECT_FALSE(fs::exists(fs::symlink_status(root + "/.wh.to-delete")));
  EXPECT_FALSE(fs::exists(root + "/opaque/old"));
  EXPECT_EQ(ReadFile(root + "/opaque/new"), "upper\n");
  EXPECT_FALSE(fs::exists(root + "/opaque/.wh..wh..opq"));
  struct stat st {};
  ASSERT_EQ(::stat((root + "/etc/greeting-link").c_str(), &st), 0);
  EXPECT_EQ(st.st_nlink, 2u);  // a hard link to etc/greeting
  ASSERT_EQ(::stat((root + "/suid").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);  // setuid dropped
  ASSERT_EQ(::stat((root + "/etc/added").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_EQ(::stat((root + "/tmp").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 01777u);
  ASSERT_EQ(::stat(root.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  EXPECT_FALSE(fs::exists(fs::symlink_status(root + "/dev/null-ish")));  // device nodes are skipped
  // The symlink to "/" resolved inside the image, not on the host.
  EXPECT_FALSE(fs::exists("/" + escape_name));
  EXPECT_EQ(ReadFile(root + "/" + escape_name), "confined\n");
  EXPECT_TRUE(CacheEntriesWith(kOciImageCacheDir, ".unpack-" + manifest_hex.substr(0, 12)).empty());

  // A second resolve reuses the tree: a marker left in it survives.
  WriteFile(root + "/marker", "kept");
  auto again = ResolveImage(spec);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->lower, cached);
  EXPECT_EQ(ReadFile(cached + "/marker"), "kept");
  fs::remove_all(cached);
}

// Whiteouts remove whole directories, nested contents and symlinks included
// (never following a link), and an opaque marker empties a directory of
// lower subdirectories too. FIFOs, directories and files keep their bits and owners.
TEST_F(OciImageTest, WhiteoutsRemoveWholeDirectories) {
  LayoutBuilder layout;
  const std::vector<TarEntry> base = {
      {"keep/", AE_IFDIR, "", 0755, ""},
      {"keep/file", AE_IFREG, "k\n", 0644, ""},
      {"gone/", AE_IFDIR, "", 0755, ""},
      {"gone/sub/", AE_IFDIR, "", 0755, ""},
      {"gone/sub/deep", AE_IFREG, "d\n", 0644, ""},
      {"gone/link", AE_IFLNK, "/etc", 0777, ""},
      {"opaque/dir/", AE_IFDIR, "", 0755, ""},
      {"opaque/dir/f", AE_IFREG, "x", 0644, ""},
  };
  const std::vector<TarEntry> top = {
      {".wh.gone", AE_IFREG, "", 0644, ""},
      {"opaque/.wh..wh..opq", AE_IFREG, "", 0644, ""},
      {".wh.missing", AE_IFREG, "", 0644, ""},  // nothing to remove: fine
      {"pipe", AE_IFIFO, "", 0751, "", 1234, 5678},
      {"owned/", AE_IFDIR, "", 0750, "", 1234, 5678},
      {"owned/file", AE_IFREG, "o", 0640, "", 4321, 8765},
      {"nodir/.wh.x", AE_IFREG, "", 0644, ""},  // a directory no layer made: nothing to do
  };
  layout.Write({{MakeTar(base), kTar}, {MakeTar(top), kTar}});
  Result<std::string> root = EnsureOciImage(layout.dir(), "", options_);
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  EXPECT_FALSE(fs::exists(fs::symlink_status(*root + "/gone")));
  EXPECT_TRUE(fs::is_directory(*root + "/opaque"));
  EXPECT_FALSE(fs::exists(fs::symlink_status(*root + "/opaque/dir")));
  EXPECT_EQ(ReadFile(*root + "/keep/file"), "k\n");
  EXPECT_TRUE(fs::exists("/etc/passwd"));  // the link was removed, not followed
  struct stat st {};
  ASSERT_EQ(::lstat((*root + "/pipe").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0751u);
  EXPECT_EQ(st.st_uid, 1234u);
  EXPECT_EQ(st.st_gid, 5678u);
  // Owners come from the entries (the unpacker runs as root).
  ASSERT_EQ(::lstat((*root + "/owned").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1234u);
  EXPECT_EQ(st.st_gid, 5678u);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
  ASSERT_EQ(::lstat((*root + "/owned/file").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 4321u);
  EXPECT_EQ(st.st_gid, 8765u);
  EXPECT_FALSE(fs::exists(*root + "/nodir"));
}

// A process killed mid-unpack leaves its temporary tree; the next unpack
// into the cache removes it (its pid is gone) but not a live process's.
TEST_F(OciImageTest, AbandonedUnpacksAreRemovedByTheNextUnpack) {
  pid_t dead = ::fork();
  ASSERT_GE(dead, 0);
  if (dead == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(dead, nullptr, 0), dead);
  fs::create_directories(options_.cache_dir);
  const std::string abandoned = options_.cache_dir + "/.unpack-0123456789ab-" + std::to_string(dead) + "-7";
  const std::string live = options_.cache_dir + "/.unpack-0123456789ab-" + std::to_string(::getpid()) + "-8";
  fs::create_directories(abandoned + "/usr/bin");
  fs::create_directories(live);
  LayoutBuilder layout;
  auto root = UnpackOne(&layout, {{"etc/os", AE_IFREG, "x\n", 0644, ""}});
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  EXPECT_FALSE(fs::exists(abandoned));
  EXPECT_TRUE(fs::exists(live));
}

class OciImageSandboxTest : public SandboxFixture {};

TEST_F(OciImageSandboxTest, SandboxRunsInTheUnpackedImage) {
  LayoutBuilder layout;
  const std::string manifest_hex = layout.Write(BusyboxLayers(RandomName("flashroll-oci-escape-")));
  SandboxSpec spec;
  ASSERT_TRUE(ParseImage(layout.dir(), &spec).ok());
  const std::string id = CreateOrDie(spec);
  ASSERT_FALSE(id.empty());
  ExecResult r = Sh(id, "cat /etc/greeting /opaque/new; ls /opaque; ls /to-delete");
  EXPECT_EQ(r.stdout_data, "hello from layer 1\nupper\nnew\n");
  EXPECT_NE(r.stderr_data.find("to-delete"), std::string::npos) << r.stderr_data;
  EXPECT_NE(r.exit_code, 0);
  // The unpacked tree is root's on the host, and root's inside (idmapped).
  EXPECT_EQ(Run(id, {"/bin/busybox", "stat", "-c", "%u:%g", "/", "/bin/busybox", "/etc/greeting"}).stdout_data,
            "0:0\n0:0\n0:0\n");
  EXPECT_TRUE(manager_->Destroy(id).ok());

  // The CLI takes the same directory.
  const auto cli = flashroll::testing::RunFlashroll("sandbox run --image " + layout.dir() +
                                                    " -- /bin/sh -c 'cat /etc/added; ls /to-delete'");
  EXPECT_EQ(cli.exit_code, 1) << cli.output;
  EXPECT_NE(cli.output.find("new in layer 2\n"), std::string::npos) << cli.output;
  EXPECT_NE(cli.output.find("to-delete"), std::string::npos) << cli.output;
  fs::remove_all(std::string(kOciImageCacheDir) + "/" + manifest_hex);
}

TEST_F(OciImageTest, TamperedBlobFailsWithDigestMismatchAndLeavesNothing) {
  LayoutBuilder layout;
  const std::string layer = MakeTar({{"etc/greeting", AE_IFREG, "hello\n", 0644, ""}});
  const std::string manifest_hex = layout.Write({{layer, kTar}});
  const std::string layer_hex = HexSha256(layer);
  std::string tampered = layer;
  tampered[512] ^= 1;  // the first byte of the file's contents
  WriteFile(layout.dir() + "/blobs/sha256/" + layer_hex, tampered);

  auto root = EnsureOciImage(layout.dir(), "", options_);
  ASSERT_FALSE(root.ok());
  EXPECT_EQ(root.status().code(), Code::kInvalidArgument);
  EXPECT_NE(root.status().message().find("blobs/sha256/" + layer_hex + " (layer 1 of 1): digest mismatch"),
            std::string::npos)
      << root.status().ToString();
  EXPECT_FALSE(fs::exists(options_.cache_dir + "/" + manifest_hex));
  EXPECT_TRUE(CacheEntriesWith(options_.cache_dir, manifest_hex.substr(0, 12)).empty());

  // Through ResolveImage, the message names the image too.
  SandboxSpec spec;
  ASSERT_TRUE(ParseImage(layout.dir(), &spec).ok());
  auto image = ResolveImage(spec);
  ASSERT_FALSE(image.ok());
  EXPECT_EQ(image.status().message().rfind("image " + layout.dir() + ": blobs/sha256/" + layer_hex, 0), 0u)
      << image.status().ToString();
  EXPECT_FALSE(fs::exists(std::string(kOciImageCacheDir) + "/" + manifest_hex));
  EXPECT_TRUE(CacheEntriesWith(kOciImageCacheDir, manifest_hex.substr(0, 12)).empty());
}

TEST_F(OciImageTest, TamperedManifestFailsWithDigestMismatch) {
  LayoutBuilder layout;
  const std::string manifest_hex = layout.Write({{MakeTar({{"a", AE_IFREG, "a", 0644, ""}}), kTar}});
  const std::string path = layout.dir() + "/blobs/sha256/" + manifest_hex;
  std::string manifest = ReadFile(path);
  manifest[manifest.size() - 1] = ' ';  // same size, different bytes
  WriteFile(path, manifest);
  auto root = EnsureOciImage(layout.dir(), "", options_);
  ASSERT_FALSE(root.ok());
  EXPECT_EQ(root.status().message().rfind("blobs/sha256/" + manifest_hex + ": digest mismatch", 0), 0u)
      << root.status().ToString();
}

TEST_F(OciImageTest, EntriesLeavingTheImageAreRejected) {
  for (const std::string bad : {"../escape", "a/../../escape", "/etc/escape"}) {
    LayoutBuilder layout;
    auto root = UnpackOne(&layout, {{"ok", AE_IFREG, "fine", 0644, ""}, {bad, AE_IFREG, "evil", 0644, ""}});
    ASSERT_FALSE(root.ok()) << bad;
    EXPECT_EQ(root.status().code(), Code::kInvalidArgument);
    EXPECT_NE(root.status().message().find("entry " + bad + ": "), std::string::npos) << root.status().ToString();
    EXPECT_FALSE(fs::exists(options_.cache_dir + "/escape"));
    EXPECT_FALSE(fs::exists("/tmp/escape"));
    EXPECT_TRUE(CacheEntriesWith(options_.cache_dir, "").empty()) << bad;  // nothing partial left behind
  }
}

TEST_F(OciImageTest, HardlinkTargetsStayInside) {
  LayoutBuilder layout;
  auto root = UnpackOne(&layout, {{"passwd", AE_IFREG, "", 0644, "../../etc/passwd"}});
  ASSERT_FALSE(root.ok());
  EXPECT_NE(root.status().message().find("hardlink target"), std::string::npos) << root.status().ToString();
}

TEST_F(OciImageTest, UnpackedSizeIsCapped) {
  LayoutBuilder layout;
  options_.max_bytes = 1000;
  auto root = UnpackOne(&layout, {{"small", AE_IFREG, std::string(600, 'a'), 0644, ""},
                                  {"big", AE_IFREG, std::string(600, 'b'), 0644, ""}});
  ASSERT_FALSE(root.ok());
  EXPECT_EQ(root.status().code(), Code::kResourceExhausted);
  EXPECT_NE(root.status().message().find("entry big"), std::string::npos) << root.status().ToString();
  EXPECT_TRUE(CacheEntriesWith(options_.cache_dir, "").empty());
}

TEST_F(OciImageTest, BadDescriptorsNameTheFileAndField) {
  LayoutBuilder layout;
  layout.Write({{MakeTar({{"a", AE_IFREG, "a", 0644, ""}}), kTar}});
  Json index = ParseJson(ReadFile(layout.dir() + "/index.json")).value();
  index["manifests"][0]["digest"] = "md5:abc";
  WriteFile(layout.dir() + "/index.json", index.dump());
  auto root = EnsureOciImage(layout.dir(), "", options_);
  ASSERT_FALSE(root.ok());
  EXPECT_EQ(root.status().message(), "index.json: manifests[0].digest: not a sha256 digest");

  index["manifests"][0]["platform"]["architecture"] = "s390x";
  index["manifests"][0]["digest"] = "sha256:" + std::string(64, 'a');
  WriteFile(layout.dir() + "/index.json", index.dump());
  root = EnsureOciImage(layout.dir(), "", options_);
  ASSERT_FALSE(root.ok());
  EXPECT_EQ(root.status().message(), "index.json: no manifest for linux/amd64");

  WriteFile(layout.dir() + "/oci-layout", R"({"imageLayoutVersion":"2.0.0"})");
  root = EnsureOciImage(layout.dir(), "", options_);
  ASSERT_FALSE(root.ok());
  EXPECT_EQ(root.status().message().rfind("oci-layout: imageLayoutVersion: unsupported", 0), 0u)
      << root.status().ToString();
}

TEST_F(OciImageTest, UnsupportedLayerMediaTypeIsNamed) {
  LayoutBuilder layout;
  const std::string manifest_hex = layout.Write({{MakeTar({{"a", AE_IFREG, "a", 0644, ""}}),
                                                  "application/vnd.oci.image.layer.v1.tar+bzip2"}});
  auto root = EnsureOciImage(layout.dir(), "", options_);
  ASSERT_FALSE(root.ok());
  EXPECT_EQ(root.status().message(), "blobs/sha256/" + manifest_hex +
                                         ": layers[0].mediaType: unsupported "
                                         "\"application/vnd.oci.image.layer.v1.tar+bzip2\"");
}

TEST_F(OciImageTest, ZstdLayersAndNestedPlatformIndexes) {
  LayoutBuilder layout;
  const std::string manifest_hex =
      layout.Write({{MakeTar({{"etc/os", AE_IFREG, "zstd\n", 0644, ""}}, ARCHIVE_FILTER_ZSTD), kTarZstd}});
  // index.json -> a multi-platform index blob -> the amd64 manifest, as
  // `docker buildx` writes layouts.
  Json amd64 = ParseJson(ReadFile(layout.dir() + "/index.json")).value()["manifests"][0];
  Json arm64 = amd64;
  arm64["platform"]["architecture"] = "arm64";
  arm64["digest"] = "sha256:" + std::string(64, '0');
  const std::string nested = Json{{"schemaVersion", 2}, {"manifests", Json::array({arm64, amd64})}}.dump();
  const std::string nested_hex = layout.AddBlob(nested);
  const Json outer = {{"mediaType", "application/vnd.oci.image.index.v1+json"},
                      {"digest", "sha256:" + nested_hex},
                      {"size", nested.size()}};
  WriteFile(layout.dir() + "/index.json", Json{{"schemaVersion", 2}, {"manifests", Json::array({outer})}}.dump());
  auto root = EnsureOciImage(layout.dir(), "", options_);
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  EXPECT_EQ(*root, options_.cache_dir + "/" + manifest_hex);
  EXPECT_EQ(ReadFile(*root + "/etc/os"), "zstd\n");

  // A nested index is a blob like any other: its digest is checked.
  WriteFile(layout.dir() + "/blobs/sha256/" + nested_hex, std::string(nested.size(), ' '));
  fs::remove_all(*root);
  root = EnsureOciImage(layout.dir(), "", options_);
  ASSERT_FALSE(root.ok());
  EXPECT_EQ(root.status().message().rfind("blobs/sha256/" + nested_hex + ": digest mismatch", 0), 0u)
      << root.status().ToString();
}

TEST_F(OciImageTest, RefAnnotationSelectsTheManifest) {
  LayoutBuilder layout;
  const std::string manifest_hex = layout.Write({{MakeTar({{"a", AE_IFREG, "a", 0644, ""}}), kTar}});
  LayoutBuilder other;
  const std::string other_hex = other.Write({{MakeTar({{"b", AE_IFREG, "b", 0644, ""}}), kTar}});
  // Two manifests without platforms, told apart by their ref.name only.
  Json index = ParseJson(ReadFile(layout.dir() + "/index.json")).value();
  index["manifests"][0].erase("platform");
  index["manifests"][0]["annotations"] = {{"org.opencontainers.image.ref.name", "v1"}};
  index["manifests"][1] = ParseJson(ReadFile(other.dir() + "/index.json")).value()["manifests"][0];
  index["manifests"][1].erase("platform");
  index["manifests"][1]["annotations"] = {{"org.opencontainers.image.ref.name", "repo:v2"}};
  fs::copy(other.dir() + "/blobs/sha256", layout.dir() + "/blobs/sha256", fs::copy_options::skip_existing | fs::copy_options::recursive);
  WriteFile(layout.dir() + "/index.json", index.dump());

  auto root = EnsureOciImage(layout.dir(), "", options_);
  ASSERT_FALSE(root.ok());
  EXPECT_EQ(root.status().message(),
            "index.json: manifests: 2 candidates and none names a platform; pick one with DIR:REF");
  root = EnsureOciImage(layout.dir(), "v1", options_);
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  EXPECT_EQ(*root, options_.cache_dir + "/" + manifest_hex);
  EXPECT_EQ(ReadFile(*root + "/a"), "a");
  root = EnsureOciImage(layout.dir(), "v3", options_);
  ASSERT_FALSE(root.ok());
  EXPECT_EQ(root.status().code(), Code::kNotFound);

  // DIR:REF on the command line and in specs; the first ':' splits.
  SandboxSpec spec;
  ASSERT_TRUE(ParseImage(layout.dir() + ":repo:v2", &spec).ok());
  EXPECT_EQ(spec.image_dir, layout.dir());
  EXPECT_EQ(spec.image_ref, "repo:v2");
  auto image = ResolveImage(spec);
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  EXPECT_EQ(image->lower, std::string(kOciImageCacheDir) + "/" + other_hex);
  EXPECT_EQ(ReadFile(image->lower + "/b"), "b");
  fs::remove_all(image->lower);
  ASSERT_TRUE(ParseImage("busybox", &spec).ok());
  EXPECT_EQ(spec.image_ref, "");
  EXPECT_EQ(ParseImage(layout.dir() + ":", &spec).code(), Code::kInvalidArgument);
  EXPECT_EQ(ParseImage("/usr:v1", &spec).code(), Code::kInvalidArgument);  // not an OCI layout
}

}  // namespace
}  // namespace flashroll::sandbox
