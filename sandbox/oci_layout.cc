#include "sandbox/oci_layout.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/json.h"
#include "common/sha256.h"
#include "sandbox/unique_fd.h"

namespace flashroll::sandbox {

namespace {

// JSON documents in a layout are small; a bigger one is hostile or broken.
constexpr uint64_t kMaxJsonBytes = 4 << 20;
// Indexes may nest (a multi-platform index inside index.json); a deeper
// chain is a loop or an attack.
constexpr int kMaxIndexDepth = 4;

constexpr char kManifestType[] = "application/vnd.oci.image.manifest.v1+json";
constexpr char kDockerManifestType[] = "application/vnd.docker.distribution.manifest.v2+json";
constexpr char kIndexType[] = "application/vnd.oci.image.index.v1+json";
constexpr char kDockerIndexType[] = "application/vnd.docker.distribution.manifest.list.v2+json";
constexpr char kRefAnnotation[] = "org.opencontainers.image.ref.name";

#if defined(__x86_64__)
constexpr char kHostArch[] = "amd64";
#elif defined(__aarch64__)
constexpr char kHostArch[] = "arm64";
#else
#error "unknown OCI architecture name for this host"
#endif

// Reads a regular file of at most `max` bytes. `name` is the path as
// messages show it (relative to the layout).
Result<std::string> ReadSmallFile(const std::string& dir, const std::string& name, uint64_t max) {
  const std::string path = dir + "/" + name;
  // O_NONBLOCK: a FIFO planted in the layout must not hang the open.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd.valid()) return Status::FromErrno(errno, name + ": open");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno(errno, name + ": fstat");
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(name + ": not a regular file");
  if (static_cast<uint64_t>(st.st_size) > max) {
    return Status::InvalidArgument(name + ": " + std::to_string(st.st_size) + " bytes, more than the " +
                                   std::to_string(max) + " allowed");
  }
  std::string data(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::read(fd.get(), data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(errno, name + ": read");
    if (n == 0) return Status::InvalidArgument(name + ": shrank while being read");
    done += static_cast<size_t>(n);
  }
  return data;
}

// Reads the blob `desc` names and checks its size and digest.
Result<std::string> ReadVerifiedBlob(const std::string& dir, const OciDescriptor& desc) {
  const std::string name = OciBlobPath(desc.digest_hex);
  if (desc.size > kMaxJsonBytes) {
    return Status::InvalidArgument(name + ": descriptor size " + std::to_string(desc.size) + " is more than the " +
                                   std::to_string(kMaxJsonBytes) + " allowed for a JSON blob");
  }
  FR_ASSIGN_OR_RETURN(std::string data, ReadSmallFile(dir, name, kMaxJsonBytes));
  if (data.size() != desc.size) {
    return Status::InvalidArgument(name + ": size mismatch: " + std::to_string(data.size()) +
                                   " bytes, the descriptor says " + std::to_string(desc.size));
  }
  Sha256 sha;
  sha.Update(data.data(), data.size());
  FR_ASSIGN_OR_RETURN(std::string actual, sha.HexDigest());
  if (actual != desc.digest_hex) {
    return Status::InvalidArgument(name + ": digest mismatch (content is sha256:" + actual + ")");
  }
  return data;
}

Result<OciDescriptor> ParseDescriptor(const JsonView& view) {
  FR_RETURN_IF_ERROR(view.ExpectObject());
  OciDescriptor desc;
  FR_ASSIGN_OR_RETURN(desc.media_type, view.GetString("mediaType"));
  FR_ASSIGN_OR_RETURN(std::string digest, view.GetString("digest"));
  const std::string hex = digest.rfind("sha256:", 0) == 0 ? digest.substr(7) : std::string();
  if (!IsSha256Hex(hex)) return Status::InvalidArgument(view.path() + ".digest: not a sha256 digest");
  desc.digest_hex = hex;
  FR_ASSIGN_OR_RETURN(desc.size, view.GetUint("size"));
  return desc;
}

bool IsIndexType(const std::string& type) { return type == kIndexType || type == kDockerIndexType; }
bool IsManifestType(const std::string& type) { return type == kManifestType || type == kDockerManifestType; }

// The entry of the index `root` to follow (a manifest or a nested index).
// Errors name the field within the index.
Result<OciDescriptor> ChooseEntry(const Json& root, const std::string& ref) {
  const JsonView index(root, "");
  FR_ASSIGN_OR_RETURN(std::vector<JsonView> manifests, index.GetArray("manifests"));
  struct Candidate {
    OciDescriptor desc;
    std::string path;
    bool has_platform = false;
    bool host_platform = false;
  };
  std::vector<Candidate> candidates;
  for (const JsonView& entry : manifests) {
    FR_ASSIGN_OR_RETURN(OciDescriptor desc, ParseDescriptor(entry));
    if (!ref.empty()) {
      if (!entry.Has("annotations")) continue;
      FR_ASSIGN_OR_RETURN(JsonView annotations, entry.GetObject("annotations"));
      FR_ASSIGN_OR_RETURN(std::string name, annotations.GetString(kRefAnnotation, ""));
      if (name != ref) continue;
    }
    Candidate candidate{desc, entry.path(), entry.Has("platform"), false};
    if (candidate.has_platform) {
      FR_ASSIGN_OR_RETURN(JsonView platform, entry.GetObject("platform"));
      FR_ASSIGN_OR_RETURN(std::string os, platform.GetString("os"));
      FR_ASSIGN_OR_RETURN(std::string arch, platform.GetString("architecture"));
      candidate.host_platform = os == "linux" && arch == kHostArch;
    }
    candidates.push_back(std::move(candidate));
  }
  if (candidates.empty()) {
    if (!ref.empty()) return Status::NotFound("no manifest has " + std::string(kRefAnnotation) + " \"" + ref + "\"");
    return Status::NotFound("manifests: empty");
  }
  const Candidate* chosen = nullptr;
  bool any_platform = false;
  for (const Candidate& c : candidates) any_platform = any_platform || c.has_platform;
  if (any_platform) {
    for (const Candidate& c : candidates) {
      if (c.host_platform) {
        chosen = &c;
        break;
      }
    }
    if (chosen == nullptr) return Status::NotFound(std::string("no manifest for linux/") + kHostArch);
  } else if (candidates.size() == 1) {
    chosen = &candidates[0];
  } else {
    return Status::InvalidArgument("manifests: " + std::to_string(candidates.size()) +
                                   " candidates and none names a platform; pick one with DIR:REF");
  }
  if (!IsManifestType(chosen->desc.media_type) && !IsIndexType(chosen->desc.media_type)) {
    return Status::InvalidArgument(chosen->path + ".mediaType: unsupported \"" + chosen->desc.media_type + "\"");
  }
  return chosen->desc;
}

// The manifest that the index `root` (the contents of `name`) leads to,
// following nested indexes down to `depth` more levels.
Result<OciDescriptor> SelectFromIndex(const std::string& dir, const std::string& name, const Json& root,
                                      const std::string& ref, int depth) {
  Result<OciDescriptor> chosen = ChooseEntry(root, ref);
  if (!chosen.ok()) return chosen.status().Wrap(name);
  if (IsManifestType(chosen->media_type)) return chosen;
  if (depth == 0) return Status::InvalidArgument(name + ": indexes nest too deeply");
  FR_ASSIGN_OR_RETURN(std::string text, ReadVerifiedBlob(dir, *chosen));
  const std::string nested = OciBlobPath(chosen->digest_hex);
  FR_ASSIGN_OR_RETURN(Json nested_root, ParseJson(text, nested));
  // A reference names an entry of index.json; nested indexes list platforms.
  return SelectFromIndex(dir, nested, nested_root, "", depth - 1);
}

Status CheckLayoutVersion(const std::string& dir) {
  FR_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(dir, "oci-layout", kMaxJsonBytes));
  FR_ASSIGN_OR_RETURN(Json root, ParseJson(text, "oci-layout"));
  Result<std::string> version = JsonView(root, "").GetString("imageLayoutVersion");
  if (!version.ok()) return version.status().Wrap("oci-layout");
  if (version->rfind("1.", 0) != 0) {
    return Status::InvalidArgument("oci-layout: imageLayoutVersion: unsupported \"" + *version + "\" (expected 1.x)");
  }
  return Status::Ok();
}

Result<OciCompression> LayerCompression(const std::string& type) {
  for (const char* base :
       {"application/vnd.oci.image.layer.v1.tar", "application/vnd.oci.image.layer.nondistributable.v1.tar"}) {
    const std::string prefix = base;
    if (type == prefix) return OciCompression::kNone;
    if (type == prefix + "+gzip") return OciCompression::kGzip;
    if (type == prefix + "+zstd") return OciCompression::kZstd;
  }
  if (type == "application/vnd.docker.image.rootfs.diff.tar.gzip" ||
      type == "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip") {
    return OciCompression::kGzip;
  }
  return Status::InvalidArgument("unsupported \"" + type + "\"");
}

}  // namespace

std::string OciBlobPath(const std::string& digest_hex) { return "blobs/sha256/" + digest_hex; }

bool IsOciLayout(const std::string& dir) {
  struct stat st {};
  return ::stat((dir + "/oci-layout").c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

Result<OciDescriptor> SelectOciManifest(const std::string& dir, const std::string& ref) {
  FR_RETURN_IF_ERROR(CheckLayoutVersion(dir));
  FR_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(dir, "index.json", kMaxJsonBytes));
  FR_ASSIGN_OR_RETURN(Json root, ParseJson(text, "index.json"));
  return SelectFromIndex(dir, "index.json", root, ref, kMaxIndexDepth);
}

Result<std::vector<OciLayer>> ReadOciManifest(const std::string& dir, const OciDescriptor& manifest) {
  const std::string name = OciBlobPath(manifest.digest_hex);
  FR_ASSIGN_OR_RETURN(std::string text, ReadVerifiedBlob(dir, manifest));
  auto parse = [&]() -> Result<std::vector<OciLayer>> {
    FR_ASSIGN_OR_RETURN(Json root, ParseJson(text, "manifest"));
    const JsonView view(root, "");
    FR_RETURN_IF_ERROR(view.ExpectObject());
    FR_ASSIGN_OR_RETURN(int64_t schema, view.GetInt("schemaVersion"));
    if (schema != 2) return Status::InvalidArgument("schemaVersion: " + std::to_string(schema) + ", expected 2");
    FR_ASSIGN_OR_RETURN(JsonView config, view.GetObject("config"));
    FR_RETURN_IF_ERROR(ParseDescriptor(config).status());
    FR_ASSIGN_OR_RETURN(std::vector<JsonView> layers, view.GetArray("layers"));
    std::vector<OciLayer> out;
    for (const JsonView& entry : layers) {
      OciLayer layer;
      FR_ASSIGN_OR_RETURN(layer.blob, ParseDescriptor(entry));
      Result<OciCompression> compression = LayerCompression(layer.blob.media_type);
      if (!compression.ok()) return compression.status().Wrap(entry.path() + ".mediaType");
      layer.compression = *compression;
      out.push_back(std::move(layer));
    }
    return out;
  };
  Result<std::vector<OciLayer>> layers = parse();
  if (!layers.ok()) return layers.status().Wrap(name);
  return layers;
}

Result<ImageDefaults> ReadOciImageDefaults(const std::string& dir, const OciDescriptor& manifest) {
  FR_ASSIGN_OR_RETURN(std::string manifest_text, ReadVerifiedBlob(dir, manifest));
  Result<OciDescriptor> config_blob = [&]() -> Result<OciDescriptor> {
    FR_ASSIGN_OR_RETURN(Json root, ParseJson(manifest_text, "manifest"));
    const JsonView view(root, "");
    FR_RETURN_IF_ERROR(view.ExpectObject());
    FR_ASSIGN_OR_RETURN(JsonView config, view.GetObject("config"));
    return ParseDescriptor(config);
  }();
  if (!config_blob.ok()) return config_blob.status().Wrap(OciBlobPath(manifest.digest_hex));
  const std::string name = OciBlobPath(config_blob->digest_hex);
  FR_ASSIGN_OR_RETURN(std::string text, ReadVerifiedBlob(dir, *config_blob));
  Result<ImageDefaults> defaults = [&]() -> Result<ImageDefaults> {
    FR_ASSIGN_OR_RETURN(Json root, ParseJson(text, "config"));
    const JsonView view(root, "");
    FR_RETURN_IF_ERROR(view.ExpectObject());
    ImageDefaults out;
    if (!view.Has("config") || view.value().at("config").is_null()) return out;
    FR_ASSIGN_OR_RETURN(JsonView config, view.GetObject("config"));
    FR_ASSIGN_OR_RETURN(std::string user, config.GetString("User", ""));
    if (!user.empty()) {
      if (Status s = ParseUserGroup(user, &out.user, &out.group); !s.ok()) return s.Wrap("config.User");
    }
    FR_ASSIGN_OR_RETURN(out.workdir, config.GetString("WorkingDir", ""));
    FR_RETURN_IF_ERROR(CheckWorkdir("config.WorkingDir", out.workdir));
    return out;
  }();
  if (!defaults.ok()) return defaults.status().Wrap(name);
  return defaults;
}

}  // namespace flashroll::sandbox
