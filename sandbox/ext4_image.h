// The steps shared by the two on-disk filesystems the manager makes: a
// sandbox's writable layer (disk.h, one per sandbox, nameless) and a
// workspace disk (workspace_disks.h, one per named workspace, kept): an
// ext4 template per size made once with mkfs.ext4, a sparse copy of it, a
// loop device over the copy and a detached mount of that device.
//
// Thread safety: free functions; EnsureExt4Template serialises makers
// (threads and processes) with a file lock.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "sandbox/unique_fd.h"

namespace flashroll::sandbox {

inline constexpr char kDiskTemplateDir[] = "/var/lib/flashroll/disk-templates";

// A writable layer lives as long as its sandbox: no journal. A workspace
// outlives sandboxes and managers: journaled, so a crash loses no more than
// the last seconds of writes.
enum class Ext4Kind { kScratch, kJournaled };

// The path of the cached empty ext4 filesystem of `bytes` (4 KiB blocks,
// one inode per 16 KiB, no reserved blocks), made on first use.
// kFailedPrecondition when mkfs.ext4 is missing.
Result<std::string> EnsureExt4Template(uint64_t bytes, Ext4Kind kind);

// Copies `template_path` into `image` (an empty file it truncates to
// `bytes`), only its data extents: the filesystem's metadata.
Status CopyExt4Template(const std::string& template_path, int image, uint64_t bytes);

struct LoopDevice {
  UniqueFd fd;
  std::string path;  // "/dev/loopN"
};

// `image` on a free loop device, with 4 KiB blocks, direct I/O (no second
// copy in the host's page cache) and autoclear (the device detaches when
// its last mount goes). kFailedPrecondition without the loop driver.
Result<LoopDevice> AttachLoop(int image);

// The ext4 filesystem on `device` as a detached mount (an fsmount
// descriptor: nosuid, nodev, noatime), for a move_mount.
Result<UniqueFd> MountExt4Detached(const std::string& device);

}  // namespace flashroll::sandbox
