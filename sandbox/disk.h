// The writable layer on disk: a sandbox's `disk` bytes (and the inodes
// that come with them) as an ext4 filesystem of its own on a loop device.
//
// The writable root (/tmp, /var/tmp, /root, everything the overlay's upper
// layer holds) used to be a tmpfs, charged to the sandbox's memory: a
// 100 MB write under a 64 MB limit was OOM-killed. Now it is disk, bounded
// by `disk` independently of `memory`: a write past it fails with ENOSPC
// inside, and the inode table (mkfs.ext4's default ratio) bounds the
// number of files.
//
// Why a loop image per sandbox and not project quotas on one shared
// filesystem: this kernel has neither CONFIG_QUOTA (ext4 refuses prjquota)
// nor XFS quota support (measured; docs/BENCHMARKS.md), so no shared
// filesystem can bound one directory. A fresh filesystem per sandbox is
// cheap when it is not made per sandbox: mkfs.ext4 runs once per distinct
// size into a cached template (ext4_image.h), and each
// sandbox gets a sparse copy of its ~150 KB of metadata in an O_TMPFILE
// file, which never has a name: it is attached to a free loop device with
// LO_FLAGS_AUTOCLEAR and LO_FLAGS_DIRECT_IO (no second copy in the host's
// page cache) and mounted by the manager as a detached mount (fsmount: the
// sandbox's child could not open the block device, its device cgroup
// program allows none), which the child moves into its own mount
// namespace. When the sandbox's last process exits the mount goes, the
// loop device detaches itself and the file's blocks are freed; a SIGKILLed
// manager leaves nothing to reclaim.
//
// Needs root (loop devices); a manager without root keeps the tmpfs.
//
// Thread safety: SandboxDisk::Create may run on several threads at once
// (templates are built under a lock, loop devices claimed with retries).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "sandbox/unique_fd.h"

namespace flashroll::sandbox {

inline constexpr char kDiskImageDir[] = "/var/lib/flashroll/disks";

// A fresh ext4 filesystem of `bytes` on a loop device, mounted detached,
// for the sandbox's child to attach. Holds the detached mount until it goes
// out of scope (after the child has attached it, or failed): unattached, it
// is then unmounted and its device detaches. Move-only.
class SandboxDisk {
 public:
  SandboxDisk() = default;
  SandboxDisk(SandboxDisk&&) noexcept = default;
  SandboxDisk& operator=(SandboxDisk&&) noexcept = default;

  // Returns kFailedPrecondition when mkfs.ext4 or loop devices are missing,
  // kIoError naming the failed step otherwise.
  static Result<SandboxDisk> Create(uint64_t bytes);

  // The detached mount (an fsmount descriptor) for the child's move_mount.
  int mount_fd() const { return mount_.get(); }
  const std::string& device() const { return device_; }  // "/dev/loopN", for messages

 private:
  UniqueFd mount_;
  std::string device_;
};

}  // namespace flashroll::sandbox
