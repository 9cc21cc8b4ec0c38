#include "sandbox/oci_layer.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <memory>
#include <unordered_set>
#include <vector>

#include "common/sha256.h"
#include "sandbox/unique_fd.h"

namespace flashroll::sandbox {

namespace {

constexpr char kWhiteoutPrefix[] = ".wh.";
constexpr char kOpaqueWhiteout[] = ".wh..wh..opq";

// The blob as libarchive reads it, hashed and counted on the way through.
struct BlobSource {
  int fd = -1;
  uint64_t limit = 0;  // the descriptor's size: reading past it is an error
  uint64_t bytes = 0;
  Sha256 sha;
  int read_errno = 0;
  bool too_long = false;
  char buffer[1 << 16];

  // Reads the next chunk into `buffer`; returns its length, 0 at the end, -1
  // on error (read_errno or too_long says which).
  ssize_t Next() {
    ssize_t n;
    do {
      n = ::read(fd, buffer, sizeof(buffer));
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
      read_errno = errno;
      return -1;
    }
    sha.Update(buffer, static_cast<size_t>(n));
    bytes += static_cast<uint64_t>(n);
    if (bytes > limit) {
      too_long = true;
      return -1;
    }
    return n;
  }
};

la_ssize_t ReadBlob(struct archive* a, void* data, const void** chunk) {
  auto* source = static_cast<BlobSource*>(data);
  const ssize_t n = source->Next();
  if (n < 0) {
    archive_set_error(a, source->read_errno != 0 ? source->read_errno : EFBIG, "blob read failed");
    return -1;
  }
  *chunk = source->buffer;
  return n;
}

struct ArchiveFree {
  void operator()(struct archive* a) const { archive_read_free(a); }
};

// The components of an entry path; fails for absolute paths and `..`.
// "./a//b/" is {"a", "b"}; "." is {} (the root itself).
Result<std::vector<std::string>> SplitEntryPath(const char* raw) {
  if (raw == nullptr) return Status::InvalidArgument("entry without a path");
  const std::string path(raw);
  if (!path.empty() && path[0] == '/') return Status::InvalidArgument("entry " + path + ": absolute path");
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    std::string part = path.substr(start, end - start);
    if (part == "..") return Status::InvalidArgument("entry " + path + ": path leaves the image (..)");
    if (!part.empty() && part != ".") parts.push_back(std::move(part));
    start = end + 1;
  }
  return parts;
}

std::string Join(const std::vector<std::string>& parts, size_t count) {
  std::string out;
  for (size_t i = 0; i < count; ++i) {
    if (i > 0) out += '/';
    out += parts[i];
  }
  return out;
}

// Opens `path` (relative to the root) as a directory, resolving every
// symlink and `..` as if `root_fd` were "/".
int OpenInRoot(int root_fd, const std::string& path) {
  struct open_how how {};
  how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
  return static_cast<int>(::syscall(SYS_openat2, root_fd, path.empty() ? "." : path.c_str(), &how, sizeof(how)));
}

// Removes `name` in `dir_fd` and, for a directory, everything below it,
// never following symlinks. A missing name is not an error.
Status RemoveAt(int dir_fd, const std::string& name) {
  struct stat st {};
  if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return errno == ENOENT ? Status::Ok() : Status::FromErrno(errno, "fstatat " + name);
  }
  if (!S_ISDIR(st.st_mode)) {
    if (::unlinkat(dir_fd, name.c_str(), 0) != 0) return Status::FromErrno(errno, "unlink " + name);
    return Status::Ok();
  }
  const int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "open " + name);
  DIR* dir = ::fdopendir(fd);
  if (dir == nullptr) {
    const int err = errno;
    ::close(fd);
    return Status::FromErrno(err, "fdopendir " + name);
  }
  std::unique_ptr<DIR, int (*)(DIR*)> owner(dir, ::closedir);
  std::vector<std::string> children;
  while (dirent* e = ::readdir(dir)) {
    const std::string child = e->d_name;
    if (child != "." && child != "..") children.push_back(child);
  }
  for (const std::string& child : children) {
    if (Status s = RemoveAt(::dirfd(dir), child); !s.ok()) return s.Wrap(name);
  }
  if (::unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR) != 0) return Status::FromErrno(errno, "rmdir " + name);
  return Status::Ok();
}

Status WriteAll(int fd, const char* data, size_t size, int64_t offset) {
  while (size > 0) {
    const ssize_t n = ::pwrite(fd, data, size, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(errno, "write");
    data += n;
    size -= static_cast<size_t>(n);
    offset += n;
  }
  return Status::Ok();
}

// Writes the entries of one layer beneath the root.
class LayerWriter {
 public:
  LayerWriter(int root_fd, struct archive* archive, OciUnpackBudget* budget)
      : root_fd_(root_fd), archive_(archive), budget_(budget), chown_(::geteuid() == 0) {}

  Status Apply(struct archive_entry* entry) {
    if (budget_->entries_left == 0) return Status::ResourceExhausted("the image has too many entries");
    --budget_->entries_left;
    const char* raw = archive_entry_pathname(entry);
    FR_ASSIGN_OR_RETURN(std::vector<std::string> parts, SplitEntryPath(raw));
    if (parts.empty()) return Status::Ok();  // the root: keeps the cache's own mode
    const std::string& name = parts.back();
    const bool whiteout = name.rfind(kWhiteoutPrefix, 0) == 0;
    Result<UniqueFd> parent = ParentDir(parts, /*create=*/!whiteout);
    if (!parent.ok()) return parent.status().Wrap(std::string("entry ") + raw);
    if (!parent->valid()) return Status::Ok();  // a whiteout in a directory no layer made
    Status status;
    if (name == kOpaqueWhiteout) {
      status = MakeOpaque(parent->get(), Join(parts, parts.size() - 1));
    } else if (whiteout) {
      status = WhiteOut(parent->get(), parts);
    } else {
      status = Write(entry, parent->get(), parts);
    }
    return status.Wrap(std::string("entry ") + raw);
  }

 private:
  // The directory holding parts.back(). Missing directories are created
  // (0755, as tar does for parents the archive does not list) or, without
  // `create`, yield an invalid descriptor.
  Result<UniqueFd> ParentDir(const std::vector<std::string>& parts, bool create) {
    UniqueFd dir(OpenInRoot(root_fd_, ""));
    if (!dir.valid()) return Status::FromErrno(errno, "openat2 image root");
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      const std::string prefix = Join(parts, i + 1);
      UniqueFd next(OpenInRoot(root_fd_, prefix));
      if (!next.valid() && errno == ENOENT) {
        if (!create) return UniqueFd();
        if (::mkdirat(dir.get(), parts[i].c_str(), 0755) != 0) return Status::FromErrno(errno, "mkdir " + prefix);
        if (::fchmodat(dir.get(), parts[i].c_str(), 0755, 0) != 0) return Status::FromErrno(errno, "chmod " + prefix);
        next.reset(OpenInRoot(root_fd_, prefix));
      }
      if (!next.valid()) return Status::FromErrno(errno, "open directory " + prefix);
      dir = std::move(next);
    }
    return dir;
  }

  // Removes the lower layers' entries in the directory `dir_fd` (`path`).
  Status MakeOpaque(int dir_fd, const std::string& path) {
    const int fd = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return Status::FromErrno(errno, "open directory");
    DIR* dir = ::fdopendir(fd);
    if (dir == nullptr) {
      const int err = errno;
      ::close(fd);
      return Status::FromErrno(err, "fdopendir");
    }
    std::unique_ptr<DIR, int (*)(DIR*)> owner(dir, ::closedir);
    std::vector<std::string> doomed;
    while (dirent* e = ::readdir(dir)) {
      const std::string child = e->d_name;
      if (child == "." || child == "..") continue;
      if (!written_.count(path.empty() ? child : path + "/" + child)) doomed.push_back(child);
    }
    for (const std::string& child : doomed) FR_RETURN_IF_ERROR(RemoveAt(dir_fd, child));
    return Status::Ok();
  }

  Status WhiteOut(int dir_fd, const std::vector<std::string>& parts) {
    const std::string target = parts.back().substr(sizeof(kWhiteoutPrefix) - 1);
    if (target.empty() || target == "." || target == "..") return Status::InvalidArgument("whiteout names nothing");
    std::vector<std::string> target_parts = parts;
    target_parts.back() = target;
    // Whiteouts hide lower layers only, never this layer's own entries.
    if (written_.count(Join(target_parts, target_parts.size()))) return Status::Ok();
    return RemoveAt(dir_fd, target);
  }

  Status Write(struct archive_entry* entry, int dir_fd, const std::vector<std::string>& parts) {
    const std::string& name = parts.back();
    for (size_t i = 1; i <= parts.size(); ++i) written_.insert(Join(parts, i));
    const mode_t type = archive_entry_filetype(entry);
    const mode_t perm = archive_entry_perm(entry) & 01777 & ~static_cast<mode_t>(S_ISUID | S_ISGID);
    if (const char* link = archive_entry_hardlink(entry)) return HardLink(link, dir_fd, name);
    if (type == AE_IFDIR) {
      struct stat st {};
      if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode)) {
        FR_RETURN_IF_ERROR(RemoveAt(dir_fd, name));
        if (::mkdirat(dir_fd, name.c_str(), 0700) != 0) return Status::FromErrno(errno, "mkdir");
      }
      FR_RETURN_IF_ERROR(Own(entry, dir_fd, name));
      if (::fchmodat(dir_fd, name.c_str(), perm, 0) != 0) return Status::FromErrno(errno, "chmod");
      return Status::Ok();
    }
    if (type == AE_IFREG) return WriteFile(entry, dir_fd, name, perm & 0777);
    if (type == AE_IFLNK) {
      const char* target = archive_entry_symlink(entry);
      if (target == nullptr) return Status::InvalidArgument("symlink without a target");
      FR_RETURN_IF_ERROR(RemoveAt(dir_fd, name));
      if (::symlinkat(target, dir_fd, name.c_str()) != 0) return Status::FromErrno(errno, "symlink");
      return Own(entry, dir_fd, name);
    }
    if (type == AE_IFIFO) {
      FR_RETURN_IF_ERROR(RemoveAt(dir_fd, name));
      if (::mknodat(dir_fd, name.c_str(), S_IFIFO | 0600, 0) != 0) return Status::FromErrno(errno, "mkfifo");
      FR_RETURN_IF_ERROR(Own(entry, dir_fd, name));
      if (::fchmodat(dir_fd, name.c_str(), perm & 0777, 0) != 0) return Status::FromErrno(errno, "chmod");
      return Status::Ok();
    }
    // Device nodes and sockets: an image has no business creating them (the
    // sandbox provides its own /dev).
    return Status::Ok();
  }

  Status WriteFile(struct archive_entry* entry, int dir_fd, const std::string& name, mode_t perm) {
    const uint64_t size = archive_entry_size_is_set(entry) ? static_cast<uint64_t>(archive_entry_size(entry)) : 0;
    if (size > budget_->bytes_left) return Status::ResourceExhausted("the image unpacks to more bytes than allowed");
    budget_->bytes_left -= size;
    FR_RETURN_IF_ERROR(RemoveAt(dir_fd, name));
    UniqueFd out(::openat(dir_fd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!out.valid()) return Status::FromErrno(errno, "create");
    for (;;) {
      const void* data = nullptr;
      size_t length = 0;
      la_int64_t offset = 0;
      const int r = archive_read_data_block(archive_, &data, &length, &offset);
      if (r == ARCHIVE_EOF) break;
      if (r < ARCHIVE_WARN) return Status::InvalidArgument(std::string("data: ") + archive_error_string(archive_));
      if (offset < 0 || static_cast<uint64_t>(offset) + length > size) {
        return Status::InvalidArgument("data beyond the entry's size");
      }
      FR_RETURN_IF_ERROR(WriteAll(out.get(), static_cast<const char*>(data), length, offset));
    }
    if (::ftruncate(out.get(), static_cast<off_t>(size)) != 0) return Status::FromErrno(errno, "truncate");
    if (chown_ && ::fchown(out.get(), archive_entry_uid(entry), archive_entry_gid(entry)) != 0) {
      return Status::FromErrno(errno, "chown");
    }
    if (::fchmod(out.get(), perm) != 0) return Status::FromErrno(errno, "chmod");
    const struct timespec times[2] = {{archive_entry_mtime(entry), archive_entry_mtime_nsec(entry)},
                                      {archive_entry_mtime(entry), archive_entry_mtime_nsec(entry)}};
    ::futimens(out.get(), times);  // best effort: a wrong mtime breaks nothing
    return Status::Ok();
  }

  Status HardLink(const char* link, int dir_fd, const std::string& name) {
    Result<std::vector<std::string>> target = SplitEntryPath(link);
    if (!target.ok()) return target.status().Wrap("hardlink target");
    if (target->empty()) return Status::InvalidArgument("hardlink to the image root");
    std::vector<std::string> parent_parts(target->begin(), target->end() - 1);
    UniqueFd target_dir(OpenInRoot(root_fd_, Join(parent_parts, parent_parts.size())));
    if (!target_dir.valid()) return Status::FromErrno(errno, std::string("hardlink target ") + link);
    FR_RETURN_IF_ERROR(RemoveAt(dir_fd, name));
    if (::linkat(target_dir.get(), target->back().c_str(), dir_fd, name.c_str(), 0) != 0) {
      return Status::FromErrno(errno, std::string("link to ") + link);
    }
    return Status::Ok();
  }

  Status Own(struct archive_entry* entry, int dir_fd, const std::string& name) {
    if (!chown_) return Status::Ok();
    if (::fchownat(dir_fd, name.c_str(), archive_entry_uid(entry), archive_entry_gid(entry),
                   AT_SYMLINK_NOFOLLOW) != 0) {
      return Status::FromErrno(errno, "chown");
    }
    return Status::Ok();
  }

  const int root_fd_;
  struct archive* const archive_;
  OciUnpackBudget* const budget_;
  const bool chown_;  // only root may give files away
  // Paths this layer wrote (with their parents): its own whiteouts spare them.
  std::unordered_set<std::string> written_;
};

Status EnableFilter(struct archive* a, OciCompression compression) {
  int r = ARCHIVE_OK;
  switch (compression) {
    case OciCompression::kNone:
      return Status::Ok();
    case OciCompression::kGzip:
      r = archive_read_support_filter_gzip(a);
      break;
    case OciCompression::kZstd:
      r = archive_read_support_filter_zstd(a);
      break;
  }
  // ARCHIVE_WARN means an external program would decompress: not wanted.
  if (r != ARCHIVE_OK) return Status::Unimplemented("libarchive cannot decompress this layer in process");
  return Status::Ok();
}

}  // namespace

Status ApplyOciLayer(int root_fd, const std::string& blob_path, const OciLayer& layer, OciUnpackBudget* budget) {
  auto source = std::make_unique<BlobSource>();
  source->limit = layer.blob.size;
  // O_NONBLOCK: a FIFO planted in the layout must not hang the open.
  UniqueFd fd(::open(blob_path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd.valid()) return Status::FromErrno(errno, "open");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno(errno, "fstat");
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument("not a regular file");
  source->fd = fd.get();

  std::unique_ptr<struct archive, ArchiveFree> archive(archive_read_new());
  if (archive == nullptr) return Status::ResourceExhausted("archive_read_new failed");
  if (archive_read_support_format_tar(archive.get()) != ARCHIVE_OK) {
    return Status::Internal("libarchive: no tar support");
  }
  FR_RETURN_IF_ERROR(EnableFilter(archive.get(), layer.compression));
  Status status;
  if (archive_read_open(archive.get(), source.get(), nullptr, ReadBlob, nullptr) != ARCHIVE_OK) {
    status = Status::InvalidArgument(std::string("not a tar archive: ") + archive_error_string(archive.get()));
  }
  LayerWriter writer(root_fd, archive.get(), budget);
  while (status.ok()) {
    struct archive_entry* entry = nullptr;
    const int r = archive_read_next_header(archive.get(), &entry);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN) {
      status = Status::InvalidArgument(std::string("tar: ") + archive_error_string(archive.get()));
      break;
    }
    status = writer.Apply(entry);
  }
  // Hash the rest (tar padding, or what an error left unread): a damaged or
  // swapped blob is reported as such rather than as whatever broke first.
  while (!source->too_long && source->read_errno == 0 && source->Next() > 0) {
  }
  if (source->read_errno != 0) return Status::FromErrno(source->read_errno, "read");
  if (source->too_long || source->bytes != layer.blob.size) {
    return Status::InvalidArgument("size mismatch: the descriptor says " + std::to_string(layer.blob.size) + " bytes");
  }
  FR_ASSIGN_OR_RETURN(std::string actual, source->sha.HexDigest());
  if (actual != layer.blob.digest_hex) {
    return Status::InvalidArgument("digest mismatch (content is sha256:" + actual + ")");
  }
  return status;
}

}  // namespace flashroll::sandbox
