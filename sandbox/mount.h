// The filesystem step: an overlayfs root, the image's binds, a minimal
// /dev, /proc, /tmp and read-write binds, then pivot_root.
//
// Parent side (PrepareMountsParentSide) turns the spec into a MountPlan: an
// ordered list of primitive operations with every string precomputed.
// Child side (MountChild) runs it with raw system calls in the new mount
// namespace (see child_status.h for why no allocation happens there).
//
// Every per-sandbox mount lives only in the sandbox's mount namespace: the
// writable layer is mounted at /run/flashroll inside that namespace, so
// when the sandbox's last process exits the kernel tears all of it down and
// nothing stays on the host. With a root manager it is the sandbox's own
// ext4 filesystem of `disk` bytes on a loop device (disk.h): on disk, not
// charged to memory. Without root it is a tmpfs of that size.
//
// Paths inside the new root are resolved with openat2(RESOLVE_IN_ROOT), so a
// symlink in an image cannot point a mount or mkdir at the host.
//
// A --rw bind is made from the descriptor its path was checked through
// (held_path.h): the parent clones the tree from it (open_tree with
// OPEN_TREE_CLONE, which a child in a new mount namespace can no longer do
// with a descriptor of the host's namespace), the child attaches that
// clone, and the device and inode of what got mounted must be the held
// ones. A rootless parent may not clone: its child reopens the path in its
// own namespace, without following symlinks, and binds it only when it is
// the held inode. Either way a path swapped after the check binds the
// checked directory or fails the create.
//
// In a sandbox with a mapped user namespace (userns.h, kMapped) the child
// mounts as the host's root, before it joins that namespace, and the files
// must look to the sandbox's root as they look to the host's:
//   - the image's lower layer is an idmapped clone (open_tree,
//     mount_setattr(MOUNT_ATTR_IDMAP), move_mount) of the image tree under
//     the scratch tmpfs, and the overlay is mounted on top of that (an
//     overlayfs mount itself cannot be idmapped); the image's read-only
//     binds (the host image's /usr, /bin, ...) are idmapped likewise, so the
//     host's uid 0 shows as 0 inside;
//   - the writable layer's root, every entry the ops create and every tmpfs
//     they mount belong to the sandbox's root (the range's base on the
//     host);
//   - --rw binds are not idmapped: inside, the host's files show with their
//     host owners (the host's root as the overflow id, 65534), and what the
//     sandbox creates there is owned on the host by its range, never by the
//     host's root. Idmapped, a file the sandbox made set-uid would be a
//     set-uid-root file on the host.
//
// Thread safety: PrepareMountsParentSide may run on any thread; MountChild
// runs only in the freshly cloned child.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "sandbox/child_status.h"
#include "sandbox/held_path.h"
#include "sandbox/spec.h"
#include "sandbox/unique_fd.h"
#include "sandbox/userns.h"

namespace flashroll::sandbox {

// One primitive filesystem operation relative to the new root.
struct MountOp {
  enum class Kind {
    kMkdir,    // mkdir `path` (existing is fine)
    kTouch,    // create an empty file `path` (existing is fine)
    kSymlink,  // `path` -> `source`
    kMknod,    // character device `path`
    kMount,    // mount a `fstype` filesystem at `path`
    kBind,     // bind host path `source` at `path`
    kBindSelf, // bind `source` (inside the new root) at `path`
    kBindHeld, // bind the held rw path `source` (held_path.h) at `path`
  };
  Kind kind = Kind::kMkdir;
  std::string path;    // relative to the new root, e.g. "usr/bin"
  std::string parent;  // dirname(path) for creating ops; "" for the root itself
  std::string name;    // basename(path) for creating ops
  std::string source;
  std::string fstype;
  std::string data;
  unsigned long flags = 0;  // MS_* for kMount
  bool read_only = false;   // for binds: read-only (every bind is nosuid, nodev)
  bool idmap = false;       // kBind: idmapped through the plan's user namespace, when it has one
  mode_t mode = 0;
  dev_t dev = 0;
  bool optional = false;  // skip when `path` or `source` does not exist
  // kBindHeld: the detached clone of the held path's tree, made in the
  // parent (-1 in a rootless plan, whose parent may not mount; the child
  // then reopens `source` in its own namespace), and the device and inode
  // the bound tree's root must have. Owned by the plan.
  int held_tree_fd = -1;
  dev_t held_dev = 0;
  ino_t held_ino = 0;
};

// Builders for MountOps (parent side).
MountOp MkdirOp(const std::string& path, mode_t mode);
MountOp TouchOp(const std::string& path);
MountOp SymlinkOp(const std::string& path, const std::string& target);
MountOp BindOp(const std::string& host_source, const std::string& path, bool read_only);

struct MountPlan {
  std::string scratch;      // where the per-sandbox tmpfs goes: /run/flashroll
  std::string tmpfs_data;   // "size=...,mode=0755"
  // The writable layer's ext4 filesystem as a detached mount (disk.h),
  // attached instead of the tmpfs; -1: the tmpfs. Not owned; set by the launch.
  int disk_mount_fd = -1;
  std::vector<std::string> scratch_dirs;  // upper, work, root (and lower) under scratch
  std::string upper;        // scratch + "/upper", the writable layer
  std::string new_root;     // scratch + "/root"
  std::string overlay_data; // lowerdir=...,upperdir=...,workdir=...
  // kMapped: the image tree whose idmapped clone is the overlay's lower
  // layer at `idmapped_lower` (a scratch dir); empty otherwise.
  std::string lower_source;
  std::string idmapped_lower;
  // kMapped: the user namespace idmapped mounts map through (not owned;
  // -1 otherwise) and the host ids of root inside, which own what the child
  // creates. Set by the launch (UseUserNamespace in contain.h).
  int idmap_userns_fd = -1;
  uint32_t owner_uid = 0;
  uint32_t owner_gid = 0;
  std::vector<MountOp> ops; // applied in order inside new_root
  // The rw paths' descriptors and their detached trees (kBindHeld ops),
  // open until the launch is over: the child inherits them across the
  // clone (close-on-exec keeps them from the init).
  HeldPaths held_paths;
  std::vector<std::shared_ptr<UniqueFd>> held_trees;
  // The writable layer's top-level trees (for the Landlock and AppArmor
  // write rules): the image's lower layer's entries and the top-level paths
  // the ops create, less symlinks and read-only binds of the host.
  std::vector<std::string> writable_root_entries;
  // The image's exec defaults (ImageLayout::defaults), for the manager.
  ImageDefaults image_defaults;
};

// Parent side: resolves the image and builds the plan. Creates the host
// directory /run/flashroll (the mount point, shared by all sandboxes) and,
// for the busybox image, the cached image tree. Returns kNotFound for a
// missing image, kIoError for a failed host-side step.
// kRootless (a manager without root): device nodes are binds of the
// host's, and the tmpfs goes over /mnt (or /tmp) instead of /run/flashroll.
// kMapped: the lower layer and the image's binds are idmapped (above).
Result<MountPlan> PrepareMountsParentSide(const SandboxSpec& spec, UsernsMode userns = UsernsMode::kNone);

// Child side: makes every mount private, mounts the tmpfs and the overlay,
// applies the ops and pivots into the new root. On success the caller's
// root and working directory are the sandbox's "/".
ChildStatus MountChild(const MountPlan& plan);

}  // namespace flashroll::sandbox
