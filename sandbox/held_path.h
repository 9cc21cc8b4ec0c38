// HeldPath: a host path a sandbox binds read-write, opened once when it is
// checked and bound later from that same descriptor.
//
// A path string checked now and bound later is two lookups: between them
// anyone who can rename in one of its directories (another sandbox with the
// parent workspace rw, renameat2(RENAME_EXCHANGE)) can turn a component
// into a symlink to any host directory, and the bind follows it. So the
// check opens the path (O_PATH, never following a symlink), the descriptor
// travels in the spec and the mount plan, and the bind is made from it
// (mount.h); the device and inode recorded here are compared with what got
// mounted.
//
// Thread safety: a HeldPath is immutable once made; share it freely.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "sandbox/unique_fd.h"

namespace flashroll::sandbox {

struct HeldPath {
  std::string path;  // absolute, symlink-free: the host path, and where it is bound inside
  UniqueFd fd;       // O_PATH | O_CLOEXEC
  dev_t dev = 0;
  ino_t ino = 0;
  mode_t mode = 0;   // st_mode: a directory or a file is bound
};

using HeldPaths = std::vector<std::shared_ptr<const HeldPath>>;

// Takes `fd` (an O_PATH descriptor of `path`) and records what it is.
// Refuses the host's root directory (kInvalidArgument): binding it
// read-write would hand over the host.
Result<std::shared_ptr<const HeldPath>> HoldOpenPath(UniqueFd fd, std::string path);

// Opens the absolute `path` from "/" without following any symlink
// (RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS): the path of `sandbox run
// --rw` and of every rw path no policy checked; it is bound at its normal
// form ("/a//b/" at "/a/b"). Errors name `path`: a
// symlink on the way is kInvalidArgument (pass its real path), a missing
// one kNotFound.
Result<std::shared_ptr<const HeldPath>> HoldHostPath(const std::string& path);

}  // namespace flashroll::sandbox
