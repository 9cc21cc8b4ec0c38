// Test helper: OCI image layouts built layer by layer with libarchive, in
// temporary directories (for oci_image_test.cc and image_store_test.cc).
#pragma once

#include <archive.h>
#include <archive_entry.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/sysmacros.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/json.h"
#include "common/sha256.h"

namespace flashroll::sandbox::oci_testing {

namespace fs = std::filesystem;

struct TarEntry {
  std::string path;
  mode_t type = AE_IFREG;  // AE_IFREG, AE_IFDIR, AE_IFLNK or AE_IFCHR (ignored with `hardlink`)
  std::string data;        // file contents, or the symlink target
  mode_t perm = 0644;
  std::string hardlink;
  uid_t uid = 0;
  gid_t gid = 0;
};

inline la_ssize_t AppendToString(struct archive*, void* out, const void* data, size_t size) {
  static_cast<std::string*>(out)->append(static_cast<const char*>(data), size);
  return static_cast<la_ssize_t>(size);
}

// A tar archive of `entries`, compressed with `filter` (ARCHIVE_FILTER_*).
inline std::string MakeTar(const std::vector<TarEntry>& entries, int filter = ARCHIVE_FILTER_NONE) {
  std::string out;
  struct archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  // The filters by name: the generic archive_write_add_filter would pull
  // every compressor into a statically linked libarchive (sandbox/CMakeLists.txt).
  switch (filter) {
    case ARCHIVE_FILTER_NONE: EXPECT_EQ(archive_write_add_filter_none(a), ARCHIVE_OK); break;
    case ARCHIVE_FILTER_GZIP: EXPECT_EQ(archive_write_add_filter_gzip(a), ARCHIVE_OK); break;
    case ARCHIVE_FILTER_ZSTD: EXPECT_EQ(archive_write_add_filter_zstd(a), ARCHIVE_OK); break;
    default: ADD_FAILURE() << "MakeTar: filter " << filter << " not supported"; break;
  }
  archive_write_set_bytes_in_last_block(a, 1);
  EXPECT_EQ(archive_write_open(a, &out, nullptr, AppendToString, nullptr), ARCHIVE_OK);
  for (const TarEntry& e : entries) {
    struct archive_entry* entry = archive_entry_new();
    archive_entry_set_pathname(entry, e.path.c_str());
    archive_entry_set_perm(entry, e.perm);
    archive_entry_set_uid(entry, e.uid);
    archive_entry_set_gid(entry, e.gid);
    if (!e.hardlink.empty()) {
      archive_entry_set_filetype(entry, AE_IFREG);
      archive_entry_set_hardlink(entry, e.hardlink.c_str());
    } else {
      archive_entry_set_filetype(entry, e.type);
    }
    if (e.type == AE_IFLNK) archive_entry_set_symlink(entry, e.data.c_str());
    if (e.type == AE_IFCHR) archive_entry_set_rdev(entry, makedev(1, 3));
    if (e.type == AE_IFREG && e.hardlink.empty()) archive_entry_set_size(entry, static_cast<la_int64_t>(e.data.size()));
    EXPECT_EQ(archive_write_header(a, entry), ARCHIVE_OK) << e.path << ": " << archive_error_string(a);
    if (e.type == AE_IFREG && e.hardlink.empty() && !e.data.empty()) {
      EXPECT_EQ(archive_write_data(a, e.data.data(), e.data.size()), static_cast<la_ssize_t>(e.data.size()));
    }
    archive_entry_free(entry);
  }
  archive_write_close(a);
  archive_write_free(a);
  return out;
}

inline std::string HexSha256(const std::string& data) {
  Sha256 sha;
  sha.Update(data.data(), data.size());
  auto hex = sha.HexDigest();
  EXPECT_TRUE(hex.ok());
  return hex.ok() ? *hex : std::string();
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void WriteFile(const std::string& path, const std::string& data) {
  std::ofstream(path, std::ios::binary) << data;
}

struct Layer {
  std::string data;
  std::string media_type;
};

// An OCI image layout in a fresh temporary directory, removed at the end.
class LayoutBuilder {
 public:
  LayoutBuilder() {
    char dir[] = "/tmp/flashroll-oci-XXXXXX";
    EXPECT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
    fs::create_directories(dir_ + "/blobs/sha256");
  }
  ~LayoutBuilder() { fs::remove_all(dir_); }

  const std::string& dir() const { return dir_; }

  // Writes a blob; returns its digest's hex.
  std::string AddBlob(const std::string& data) {
    const std::string hex = HexSha256(data);
    WriteFile(dir_ + "/blobs/sha256/" + hex, data);
    return hex;
  }

  // Writes the config, the manifest, index.json and oci-layout; returns the
  // manifest digest's hex. The config carries a nonce so that every layout
  // (and so every cache entry) of a test run is new, and `run_config` (an
  // object: User, WorkingDir, ...) as its "config" unless it is null.
  std::string Write(const std::vector<Layer>& layers, const Json& run_config = Json()) {
    std::random_device rd;
    Json config_doc = {{"architecture", "amd64"}, {"os", "linux"}, {"nonce", std::to_string(rd())}};
    if (!run_config.is_null()) config_doc["config"] = run_config;
    const std::string config = config_doc.dump();
    Json manifest = {{"schemaVersion", 2},
                     {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                     {"config", Descriptor("application/vnd.oci.image.config.v1+json", config)},
                     {"layers", Json::array()}};
    for (const Layer& layer : layers) manifest["layers"].push_back(Descriptor(layer.media_type, layer.data));
    const std::string manifest_text = manifest.dump();
    const Json entry = Descriptor("application/vnd.oci.image.manifest.v1+json", manifest_text);
    Json index = {{"schemaVersion", 2}, {"manifests", Json::array({entry})}};
    index["manifests"][0]["platform"] = {{"os", "linux"}, {"architecture", "amd64"}};
    WriteFile(dir_ + "/index.json", index.dump());
    WriteFile(dir_ + "/oci-layout", R"({"imageLayoutVersion":"1.0.0"})");
    return HexSha256(manifest_text);
  }

 private:
  Json Descriptor(const std::string& media_type, const std::string& data) {
    return {{"mediaType", media_type}, {"digest", "sha256:" + AddBlob(data)}, {"size", data.size()}};
  }

  std::string dir_;
};

inline constexpr char kTar[] = "application/vnd.oci.image.layer.v1.tar";
inline constexpr char kTarGzip[] = "application/vnd.oci.image.layer.v1.tar+gzip";
inline constexpr char kTarZstd[] = "application/vnd.oci.image.layer.v1.tar+zstd";

}  // namespace flashroll::sandbox::oci_testing
