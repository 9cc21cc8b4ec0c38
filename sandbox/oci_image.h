// OCI image layouts as sandbox images: the layers of the manifest a layout
// selects are unpacked once into <cache>/<manifest digest hex>, a plain tree
// that then serves as the overlay's read-only lower layer. The manifest
// digest covers every layer's digest, so equal digests mean equal trees.
//
// Thread safety: EnsureOciImage may be called from any thread and process;
// trees are built as tree_cache.h describes.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "sandbox/spec.h"

namespace flashroll::sandbox {

// Where unpacked OCI images live.
inline constexpr char kOciImageCacheDir[] = "/var/lib/flashroll/images/oci";

struct OciImageOptions {
  std::string cache_dir = kOciImageCacheDir;
  uint64_t max_bytes = uint64_t{8} << 30;  // regular-file bytes over all layers
  uint64_t max_entries = 1000000;          // archive entries over all layers
};

// Returns the unpacked root of the image in the layout `layout_dir` (the
// manifest SelectOciManifest picks for `ref`), unpacking it on first use.
// Errors are those of oci_layout.h and oci_layer.h, naming the file, field or
// entry (a layer as "blobs/sha256/<hex> (layer 2 of 3)"); nothing of a
// failed unpack is left in the cache.
Result<std::string> EnsureOciImage(const std::string& layout_dir, const std::string& ref,
                                   const OciImageOptions& options);

// The config defaults (ReadOciImageDefaults) of the image EnsureOciImage
// unpacks for `layout_dir` and `ref`.
Result<ImageDefaults> OciImageDefaults(const std::string& layout_dir, const std::string& ref);

}  // namespace flashroll::sandbox
