// OCI image layouts (image-spec "image-layout.md"): finding the image to run
// through index.json and the layers its manifest lists.
//
// The layout is untrusted input. Every blob read here is checked against the
// size and sha256 digest that name it; only sha256 digests are accepted.
// Errors are kInvalidArgument (kNotFound for a missing file or manifest) and
// name the file and the field: "index.json: manifests[0].digest: not a
// sha256 digest", "blobs/sha256/ab12...: digest mismatch".
//
// Thread safety: the functions only read files; call them from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "sandbox/spec.h"

namespace flashroll::sandbox {

// A content descriptor: what a blob is and which blob it is.
struct OciDescriptor {
  std::string media_type;
  std::string digest_hex;  // the 64 hex digits after "sha256:"
  uint64_t size = 0;       // bytes
};

enum class OciCompression { kNone, kGzip, kZstd };

struct OciLayer {
  OciDescriptor blob;
  OciCompression compression = OciCompression::kNone;
};

// True if `dir` holds an `oci-layout` file, the mark of an image layout.
bool IsOciLayout(const std::string& dir);

// The image manifest that `dir`'s index.json selects, following nested image
// indexes. With a non-empty `ref`, only manifests whose
// org.opencontainers.image.ref.name annotation equals it are candidates.
// Among candidates that name a platform, the one for linux and this host's
// architecture (amd64 on x86-64) is taken; without platforms there must be
// exactly one candidate. Checks `oci-layout`'s imageLayoutVersion first.
Result<OciDescriptor> SelectOciManifest(const std::string& dir, const std::string& ref);

// The layers of `manifest`, bottom first, read from its verified blob.
// Layer media types: the OCI tar, tar+gzip and tar+zstd layers (and their
// non-distributable forms) and Docker's rootfs.diff.tar.gzip.
Result<std::vector<OciLayer>> ReadOciManifest(const std::string& dir, const OciDescriptor& manifest);

// The defaults of `manifest`'s image config (its verified config blob):
// config.User ("USER[:GROUP]", names or numbers, as ParseUserGroup reads
// it) and config.WorkingDir (absolute). Both are optional, and so is
// `config`. Errors name the blob and the field
// ("blobs/sha256/ab12...: config.User: ...").
Result<ImageDefaults> ReadOciImageDefaults(const std::string& dir, const OciDescriptor& manifest);

// "blobs/sha256/<hex>": where a blob lives, relative to the layout.
std::string OciBlobPath(const std::string& digest_hex);

}  // namespace flashroll::sandbox
