#include "sandbox/oci_image.h"

#include <fcntl.h>

#include <vector>

#include "sandbox/oci_layer.h"
#include "sandbox/oci_layout.h"
#include "sandbox/tree_cache.h"
#include "sandbox/unique_fd.h"

namespace flashroll::sandbox {

Result<std::string> EnsureOciImage(const std::string& layout_dir, const std::string& ref,
                                   const OciImageOptions& options) {
  FR_ASSIGN_OR_RETURN(OciDescriptor manifest, SelectOciManifest(layout_dir, ref));
  return EnsureTree(options.cache_dir + "/" + manifest.digest_hex, [&](const std::string& tmp) -> Status {
    FR_ASSIGN_OR_RETURN(std::vector<OciLayer> layers, ReadOciManifest(layout_dir, manifest));
    UniqueFd root(::open(tmp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!root.valid()) return Status::FromErrno(errno, "open " + tmp);
    OciUnpackBudget budget{options.max_bytes, options.max_entries};
    for (size_t i = 0; i < layers.size(); ++i) {
      const std::string blob = OciBlobPath(layers[i].blob.digest_hex);
      Status status = ApplyOciLayer(root.get(), layout_dir + "/" + blob, layers[i], &budget);
      if (!status.ok()) {
        return status.Wrap(blob + " (layer " + std::to_string(i + 1) + " of " + std::to_string(layers.size()) + ")");
      }
    }
    return Status::Ok();
  });
}

Result<ImageDefaults> OciImageDefaults(const std::string& layout_dir, const std::string& ref) {
  FR_ASSIGN_OR_RETURN(OciDescriptor manifest, SelectOciManifest(layout_dir, ref));
  return ReadOciImageDefaults(layout_dir, manifest);
}

}  // namespace flashroll::sandbox
