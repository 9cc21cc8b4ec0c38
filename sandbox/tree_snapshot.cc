#include "sandbox/tree_snapshot.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <climits>

#include "sandbox/unique_fd.h"

namespace flashroll::sandbox {
namespace {

// The mount `fd` is on. Not st_dev: an overlayfs reports its upper
// layer's device for files and its own for directories.
Result<uint64_t> MountOf(int fd, const std::string& path) {
  struct statx stx {};
  if (::statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, STATX_MNT_ID, &stx) != 0) {
    return Status::FromErrno(errno, "statx " + path);
  }
  if (!(stx.stx_mask & STATX_MNT_ID)) return Status::FailedPrecondition("statx " + path + ": the kernel reports no mount id");
  return uint64_t{stx.stx_mnt_id};
}

class Walker {
 public:
  Walker(const SnapshotLimits& limits, uint64_t mount) : limits_(limits), mount_(mount) {}

  // Copies the directory `dir` (already open, O_DIRECTORY) as `prefix`.
  Status Walk(int dir, const std::string& prefix) {
    // fdopendir takes its own descriptor: the caller's stays the caller's.
    const int listed = ::openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (listed < 0) return Status::FromErrno(errno, "open " + Shown(prefix));
    DIR* stream = ::fdopendir(listed);
    if (stream == nullptr) {
      ::close(listed);
      return Status::FromErrno(errno, "fdopendir " + Shown(prefix));
    }
    std::vector<std::string> names;
    while (const dirent* entry = ::readdir(stream)) {
      const std::string name = entry->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    ::closedir(stream);
    // A stable order: the same tree always gives the same snapshot.
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) FR_RETURN_IF_ERROR(Entry(dir, prefix.empty() ? name : prefix + "/" + name, name));
    return Status::Ok();
  }

  TreeSnapshot Take() { return std::move(snapshot_); }

 private:
  static std::string Shown(const std::string& path) { return path.empty() ? "." : path; }

  Status Count(size_t bytes) {
    snapshot_.bytes += bytes;
    if (snapshot_.bytes > limits_.max_bytes) {
      return Status::ResourceExhausted("the tree holds more than " + std::to_string(limits_.max_bytes) + " bytes");
    }
    if (snapshot_.entries.size() >= limits_.max_entries) {
      return Status::ResourceExhausted("the tree holds more than " + std::to_string(limits_.max_entries) + " entries");
    }
    return Status::Ok();
  }

  Status Entry(int dir, const std::string& path, const std::string& name) {
    UniqueFd at(::openat(dir, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (!at.valid()) {
      if (errno == ENOENT) return Status::Ok();  // gone meanwhile: nothing to copy
      return Status::FromErrno(errno, "open " + path);
    }
    struct stat st {};
    if (::fstat(at.get(), &st) != 0) return Status::FromErrno(errno, "fstat " + path);
    FR_ASSIGN_OR_RETURN(const uint64_t mount, MountOf(at.get(), path));
    if (mount != mount_) {
      ++snapshot_.skipped;
      return Status::Ok();
    }
    TreeEntry entry;
    entry.path = path;
    entry.mode = st.st_mode & 0777;
    if (S_ISLNK(st.st_mode)) {
      entry.kind = TreeEntry::Kind::kSymlink;
      std::string target(PATH_MAX, '\0');
      const ssize_t n = ::readlinkat(at.get(), "", target.data(), target.size());
      if (n < 0) return Status::FromErrno(errno, "readlink " + path);
      target.resize(static_cast<size_t>(n));
      FR_RETURN_IF_ERROR(Count(target.size()));
      entry.data = std::move(target);
      snapshot_.entries.push_back(std::move(entry));
      return Status::Ok();
    }
    if (S_ISDIR(st.st_mode)) {
      entry.kind = TreeEntry::Kind::kDirectory;
      FR_RETURN_IF_ERROR(Count(0));
      snapshot_.entries.push_back(std::move(entry));
      UniqueFd sub(::openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!sub.valid()) return Status::FromErrno(errno, "open " + path);
      if (Status same = SameInode(sub.get(), st, path); !same.ok()) return same;
      return Walk(sub.get(), path);
    }
    if (!S_ISREG(st.st_mode)) {
      ++snapshot_.skipped;
      return Status::Ok();
    }
    entry.kind = TreeEntry::Kind::kFile;
    UniqueFd file(::openat(dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
    if (!file.valid()) return Status::FromErrno(errno, "open " + path);
    FR_RETURN_IF_ERROR(SameInode(file.get(), st, path));
    FR_RETURN_IF_ERROR(Count(static_cast<size_t>(st.st_size)));
    entry.data.resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < entry.data.size()) {
      const ssize_t n = ::read(file.get(), entry.data.data() + done, entry.data.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Status::FromErrno(errno, "read " + path);
      if (n == 0) break;  // shorter than fstat said: the sandbox is frozen, so it was truncated before
      done += static_cast<size_t>(n);
    }
    entry.data.resize(done);
    snapshot_.entries.push_back(std::move(entry));
    return Status::Ok();
  }

  // The opened descriptor is the inode O_PATH looked at (not one swapped in).
  static Status SameInode(int fd, const struct stat& expected, const std::string& path) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return Status::FromErrno(errno, "fstat " + path);
    if (st.st_dev != expected.st_dev || st.st_ino != expected.st_ino) {
      return Status::FailedPrecondition(path + " changed while it was copied");
    }
    return Status::Ok();
  }

  const SnapshotLimits& limits_;
  const uint64_t mount_;
  TreeSnapshot snapshot_;
};

// Opens the directory `path` beneath `root_fd`, no symlink on the way.
Result<UniqueFd> OpenTop(int root_fd, const std::string& path) {
  if (path.empty() || path[0] != '/') return Status::InvalidArgument("tree path '" + path + "' is not absolute");
  open_how how{};
  how.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  const std::string relative = path.substr(1);
  UniqueFd top(static_cast<int>(::syscall(SYS_openat2, root_fd, relative.empty() ? "." : relative.c_str(), &how, sizeof(how))));
  if (!top.valid()) {
    if (errno == ENOENT || errno == ENOTDIR) return Status::NotFound(path + ": no such directory");
    return Status::FromErrno(errno, "open " + path);
  }
  return top;
}

}  // namespace

Status RestoreTree(int root_fd, const std::string& path, const TreeSnapshot& snapshot, uid_t uid, gid_t gid,
                   uint32_t width) {
  FR_ASSIGN_OR_RETURN(UniqueFd top, OpenTop(root_fd, path));
  struct stat top_st {};
  if (::fstat(top.get(), &top_st) != 0) return Status::FromErrno(errno, "restore: fstat " + path);
  if (top_st.st_uid - uid < width && top_st.st_gid - gid < width) {
    uid = top_st.st_uid;
    gid = top_st.st_gid;
  }
  // The directories made so far, by path: every entry is made relative to
  // its parent's descriptor, one that this function opened on what it made.
  std::map<std::string, UniqueFd> dirs;
  for (const TreeEntry& e : snapshot.entries) {
    const size_t slash = e.path.rfind('/');
    const std::string parent = slash == std::string::npos ? "" : e.path.substr(0, slash);
    const std::string name = slash == std::string::npos ? e.path : e.path.substr(slash + 1);
    int at = top.get();
    if (!parent.empty()) {
      auto found = dirs.find(parent);
      if (found == dirs.end()) return Status::InvalidArgument("restore " + e.path + ": its directory is not in the snapshot before it");
      at = found->second.get();
    }
    if (name.empty() || name == "." || name == "..") return Status::InvalidArgument("restore '" + e.path + "': not a plain name");
    const std::string what = "restore " + path + "/" + e.path;
    switch (e.kind) {
      case TreeEntry::Kind::kDirectory: {
        if (::mkdirat(at, name.c_str(), 0700) != 0) return Status::FromErrno(errno, what);
        UniqueFd made(::openat(at, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!made.valid()) return Status::FromErrno(errno, what);
        if (::fchown(made.get(), uid, gid) != 0 || ::fchmod(made.get(), e.mode) != 0) return Status::FromErrno(errno, what);
        dirs.emplace(e.path, std::move(made));
        break;
      }
      case TreeEntry::Kind::kSymlink:
        if (::symlinkat(e.data.c_str(), at, name.c_str()) != 0) return Status::FromErrno(errno, what);
        if (::fchownat(at, name.c_str(), uid, gid, AT_SYMLINK_NOFOLLOW) != 0) return Status::FromErrno(errno, what);
        break;
      case TreeEntry::Kind::kFile: {
        UniqueFd file(::openat(at, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
        if (!file.valid()) return Status::FromErrno(errno, what);
        for (size_t done = 0; done < e.data.size();) {
          const ssize_t n = ::write(file.get(), e.data.data() + done, e.data.size() - done);
          if (n < 0 && errno == EINTR) continue;
          if (n < 0) return Status::FromErrno(errno, what);
          done += static_cast<size_t>(n);
        }
        if (::fchown(file.get(), uid, gid) != 0 || ::fchmod(file.get(), e.mode) != 0) return Status::FromErrno(errno, what);
        break;
      }
    }
  }
  return Status::Ok();
}

Result<TreeSnapshot> SnapshotTree(int root_fd, const std::string& path, const SnapshotLimits& limits) {
  auto top = OpenTop(root_fd, path);
  if (!top.ok()) return top.status().Wrap("snapshot");
  FR_ASSIGN_OR_RETURN(const uint64_t mount, MountOf(top->get(), path));
  Walker walker(limits, mount);
  if (Status s = walker.Walk(top->get(), ""); !s.ok()) return s.Wrap("snapshot of " + path);
  return walker.Take();
}

}  // namespace flashroll::sandbox
