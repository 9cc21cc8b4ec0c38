// Root filesystem images: what the read-only lower layer of a sandbox is.
//
//  host     a read-only bind of the host's /usr (and of /bin, /lib, /lib64,
//           /sbin where they are directories) over a cached lower tree: the
//           top-level directories, the /bin, /lib, ... symlinks of a
//           merged-/usr host, and copies of the /etc entries that bash,
//           python3 and git need, rebuilt when one of those changes on the
//           host. Secrets such as /etc/shadow and /etc/ssl/private are not
//           copied.
//  busybox  a tree built once under /var/lib/flashroll/images/busybox from
//           Debian's busybox-static: /bin/busybox plus one link per applet.
//  DIR      an OCI image layout (a directory with an `oci-layout` file): its
//           layers unpacked once under /var/lib/flashroll/images/oci/
//           (sandbox/oci_image.h); any other directory tree is used as the
//           lower layer as it is.
//
// Thread safety: ResolveImage may be called from any thread and process;
// the busybox, host and OCI trees are built once as tree_cache.h describes.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "sandbox/mount.h"
#include "sandbox/spec.h"

namespace flashroll::sandbox {

struct ImageLayout {
  std::string lower;          // overlay lowerdir; empty: an empty directory
  std::vector<MountOp> ops;   // the image's own mount points and binds
  // An OCI image's config User and WorkingDir (ReadOciImageDefaults);
  // empty for the other images.
  ImageDefaults defaults;
};

// Returns the layout of spec.image. kNotFound when the busybox binary or
// the directory is missing; kIoError when building the busybox tree fails;
// for an OCI layout, the error of EnsureOciImage, naming the file and field.
Result<ImageLayout> ResolveImage(const SandboxSpec& spec);

// Where image trees are cached (as root; rootless: /tmp/flashroll-images-UID).
inline constexpr char kImageCacheDir[] = "/var/lib/flashroll/images";
// Where the busybox tree lives (built on first use).
inline constexpr char kBusyboxImageDir[] = "/var/lib/flashroll/images/busybox";

}  // namespace flashroll::sandbox
