// Trees built once and shared by every sandbox and process: the busybox and
// host images and unpacked OCI images (image.h, oci_image.h).
//
// A tree is built in a temporary directory beside its final place and renamed
// there, so a tree that is present is complete; builders that race each build
// and one rename wins. The temporary directory of a builder killed midway
// (".unpack-<name prefix>-<pid>-<random>") is removed by the next build in the
// same cache once its pid is gone.
//
// Thread safety: safe from any thread and process.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>

#include "common/status.h"

namespace flashroll::sandbox {

// mkdir -p with `mode` for the directories it creates.
Status MakeDirs(const std::string& path, mode_t mode);

// Removes `path` and everything below it, never following symlinks; best
// effort (a leftover temporary tree is harmless).
void RemoveTree(const std::string& path);

// Returns `dir`, first calling `build` on an empty temporary directory (mode
// 0700 while building, 0755 once in place) when `dir` does not exist yet.
// `build`'s error is returned as it is, and nothing of the attempt is left.
Result<std::string> EnsureTree(const std::string& dir, const std::function<Status(const std::string& tmp)>& build);

}  // namespace flashroll::sandbox
