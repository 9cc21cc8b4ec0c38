// Applying one OCI image layer (a tar archive, plain, gzip or zstd) to a root
// filesystem under construction, whiteouts included (image-spec "layer.md"):
// `.wh.NAME` removes NAME as lower layers left it, `.wh..wh..opq` empties its
// directory of everything lower layers put there.
//
// The layer is untrusted input:
//  - the blob's size and sha256 digest are checked as it is read, so what is
//    checked is what is unpacked;
//  - entry paths that are absolute or have a `..` component are rejected;
//  - every path is resolved inside the root (openat2 RESOLVE_IN_ROOT), so a
//    symlink placed by a layer can never make a later entry land outside it;
//  - setuid and setgid bits, device nodes, sockets, extended attributes
//    (file capabilities) and ACLs are dropped;
//  - regular-file bytes and entries are counted against a budget.
//
// Thread safety: distinct calls on distinct trees may run concurrently.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "sandbox/oci_layout.h"

namespace flashroll::sandbox {

// What is left of the limits on an unpacked image, shared by its layers.
struct OciUnpackBudget {
  uint64_t bytes_left = 0;    // bytes of regular files
  uint64_t entries_left = 0;  // archive entries
};

// Applies the layer blob at `blob_path` (described by `layer`) to the tree
// under the directory `root_fd`. Errors name the entry, as in "entry
// ../x: path leaves the image", or the blob's flaw ("digest mismatch"), with
// kInvalidArgument for a bad layer and kResourceExhausted when the budget
// runs out. On error the tree is partly written; the caller discards it.
Status ApplyOciLayer(int root_fd, const std::string& blob_path, const OciLayer& layer, OciUnpackBudget* budget);

}  // namespace flashroll::sandbox
