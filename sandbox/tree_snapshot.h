// TreeSnapshot: a copy, in memory, of one directory tree inside a frozen
// sandbox — what an agent left in its working directory, taken when none of
// its processes can run, so that its outcome is judged on a state it can no
// longer change (Manager::SnapshotFrozen, rollout's verification).
//
// The walk runs in the manager's own process, as root, over the sandbox's
// root directory (the descriptor the files API takes, file_access.h): every
// name is opened relative to its parent's descriptor with O_NOFOLLOW, and
// a directory or file on another mount than the tree's top (a bind or a
// /proc) is skipped, so neither a symlink nor a mount can lead the
// walk outside the tree. Symlinks are recorded as links (their target,
// never followed); FIFOs, sockets and devices are skipped without being
// opened (opening a FIFO would wake a writer; a device may act). Each file
// is looked at with O_PATH and fstat before it is opened, and the open is
// checked against that inode.
//
// RestoreTree writes a snapshot back, into an empty directory of a sandbox
// that none of the snapshot's processes ever ran in (a fresh one): from the
// manager's process again, each entry made relative to its parent's
// descriptor (mkdirat, openat O_CREAT | O_EXCL | O_NOFOLLOW, symlinkat) and
// given to the sandbox's root user, so no link in the snapshot is ever
// followed (nothing of a snapshot lies beneath a link) and nothing outside
// the directory is touched. Microseconds an entry, where the files API
// costs a helper process each.
//
// Thread safety: plain functions.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace flashroll::sandbox {

struct TreeEntry {
  enum class Kind { kDirectory, kFile, kSymlink };
  std::string path;  // relative to the snapshot's top, '/'-separated, parents first
  Kind kind = Kind::kFile;
  mode_t mode = 0;   // permission bits (07777 masked to 0777: set-id bits are not kept)
  std::string data;  // a file's contents or a symlink's target
};

struct TreeSnapshot {
  std::vector<TreeEntry> entries;
  uint64_t bytes = 0;     // file contents and link targets together
  size_t skipped = 0;     // FIFOs, sockets, devices, other mounts
};

struct SnapshotLimits {
  uint64_t max_bytes = uint64_t{64} << 20;
  size_t max_entries = 100000;
};

// Copies the tree at `path` (absolute, as the sandbox sees it) beneath
// `root_fd`, the sandbox's root directory. kNotFound when `path` is not a
// directory there; kResourceExhausted naming the limit when the tree holds
// more bytes or entries than `limits`; the failed call otherwise.
Result<TreeSnapshot> SnapshotTree(int root_fd, const std::string& path, const SnapshotLimits& limits);

// Writes `snapshot` into the empty directory `path` beneath `root_fd`,
// every entry owned by the directory's own owner when its uid lies in
// [uid, uid + width) and its gid in [gid, gid + width) (the sandbox's ids:
// a directory its user made, e.g. an agent running as a non-root user),
// else by `uid`:`gid` (host ids: the sandbox's root). kNotFound when
// `path` is no directory; kInvalidArgument for an entry whose parent is
// not in the snapshot before it; the failed call otherwise (EEXIST
// included: the directory was not empty).
Status RestoreTree(int root_fd, const std::string& path, const TreeSnapshot& snapshot, uid_t uid, gid_t gid,
                   uint32_t width = 1);

}  // namespace flashroll::sandbox
