// ConfinedRoot: opens files named by an untrusted client, but only beneath
// one directory the operator chose (a checkpoint root).
//
// Every open is one openat2(root, relative, O_RDONLY | O_NONBLOCK |
// O_CLOEXEC, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS): the kernel refuses an
// absolute path, a ".." that climbs above the root, and a symlink whose
// target lies outside it (or is a /proc magic link), checking each component
// as it resolves, so a path cannot be swapped for a symlink between a check
// and the open. The opened file must then be a regular file by fstat: a
// FIFO, socket, device or directory is refused. O_NONBLOCK makes opening a
// FIFO return at once instead of waiting for a writer.
//
// Errors, each naming the relative path and the root:
//   PermissionDenied  absolute, escaping, magic link, not a regular file
//   NotFound          no such file beneath the root
//   Unimplemented     a kernel without openat2 (before Linux 5.6)
//
// Thread safety: immutable after Open(); const methods may be called from
// any number of threads.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "engine/format/mapped_file.h"

namespace flashroll::engine {

class ConfinedRoot {
 public:
  // Opens `root`, which must be a directory. NotFound / PermissionDenied
  // naming it, or InvalidArgument "<root>: not a directory".
  static Result<std::unique_ptr<ConfinedRoot>> Open(const std::string& root);

  ~ConfinedRoot();
  ConfinedRoot(const ConfinedRoot&) = delete;
  ConfinedRoot& operator=(const ConfinedRoot&) = delete;

  // Opens `relative` beneath the root and checks it is a regular file.
  // Returns an open descriptor the caller owns (close it), or the errors
  // listed above.
  Result<int> OpenRegularFile(const std::string& relative) const;

  // OpenRegularFile, then maps the whole file (MappedFile::FromFd).
  Result<std::unique_ptr<MappedFile>> Map(const std::string& relative) const;

  // The mapper of the directory `relative` beneath the root, for
  // ModelFiles::LoadHf: each name is opened as relative + "/" + name.
  DirectoryFileMapper MapperFor(const std::string& relative) const;

  const std::string& path() const { return path_; }

 private:
  ConfinedRoot(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

  const std::string path_;
  const int fd_;  // O_PATH | O_DIRECTORY
};

}  // namespace flashroll::engine
