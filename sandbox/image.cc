#include "sandbox/image.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>

#include "sandbox/oci_image.h"
#include "sandbox/oci_layout.h"
#include "sandbox/tree_cache.h"

namespace flashroll::sandbox {

namespace {

// The /etc entries a host-image sandbox sees: name resolution, the dynamic
// linker, TLS roots, locale and time, shells, python and git configuration,
// and PAM's configuration (su, runuser; /etc/shadow stays out: as root
// inside, pam_rootok lets su through without it).
constexpr const char* kHostEtc[] = {
    "passwd",        "group",         "hosts",         "resolv.conf",    "nsswitch.conf", "host.conf",
    "gai.conf",      "ld.so.cache",   "ld.so.conf",    "ld.so.conf.d",   "localtime",     "timezone",
    "ssl",           "ca-certificates", "ca-certificates.conf", "alternatives", "os-release",
    "debian_version", "gitconfig",    "profile",       "profile.d",      "bash.bashrc",   "inputrc",
    "mime.types",    "protocols",     "services",      "environment",    "shells",        "python3",
    "python3.11",    "login.defs",    "magic",         "magic.mime",     "mailcap",       "terminfo",
    "pam.d",         "pam.conf",      "security",
};

constexpr const char* kHostTop[] = {"bin", "lib", "lib32", "lib64", "libx32", "sbin"};

// Never copied out of the allowlisted /etc trees: private keys.
constexpr const char* kHostEtcSecrets[] = {"ssl/private"};

constexpr const char* kHostSkeletonDirs[] = {"etc", "usr", "root", "home", "var", "run", "mnt", "opt", "srv"};

// Identity and content version; not ctime, which chmod or a restored mtime
// would change without changing what is copied.
void AppendStat(const struct stat& st, std::string* key) {
  *key += std::to_string(st.st_mode) + "," + std::to_string(st.st_ino) + "," + std::to_string(st.st_size) + "," +
          std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + ";";
}

// What the skeleton is built from: the identity of every /etc entry and
// host top-level entry it copies. A changed file or directory (edited,
// replaced, an entry added or removed) changes the key, and a new skeleton
// is built; unchanged state reuses the one on disk.
std::string HostSkeletonKey() {
  std::string key = "v2:";  // v2: the locked /etc/shadow
  for (const char* entry : kHostEtc) {
    struct stat st {};
    key += entry;
    if (::stat((std::string("/etc/") + entry).c_str(), &st) == 0) AppendStat(st, &key);
    key += "|";
  }
  for (const char* top : kHostTop) {
    struct stat st {};
    key += top;
    if (::lstat((std::string("/") + top).c_str(), &st) == 0) AppendStat(st, &key);
    key += "|";
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(std::hash<std::string>()(key)));
  return hex;
}

// Where image trees are cached: /var/lib/flashroll/images for root, and a
// private directory of the user's under /tmp otherwise (rootless mode).
Result<std::string> ImageCacheDir() {
  if (::geteuid() == 0) return std::string(kImageCacheDir);
  const std::string dir = "/tmp/flashroll-images-" + std::to_string(::geteuid());
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return Status::FromErrno(errno, "mkdir " + dir);
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return Status::FromErrno(errno, "stat " + dir);
  // Someone else's directory (or a symlink) planted there must not be used.
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) {
    return Status::FailedPrecondition(dir + ": not a private directory of this user");
  }
  return dir;
}

Status WriteWholeFile(const std::string& path, const std::string& data, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return Status::FromErrno(errno, "open " + path);
  const ssize_t n = ::write(fd, data.data(), data.size());
  const int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(data.size())) return Status::FromErrno(n < 0 ? err : EIO, "write " + path);
  return Status::Ok();
}

Status CopyFile(const std::string& from, const std::string& to, mode_t mode) {
  const int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return Status::FromErrno(errno, "open " + from);
  const int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (out < 0) {
    const int err = errno;
    ::close(in);
    return Status::FromErrno(err, "open " + to);
  }
  char buf[1 << 16];
  Status status;
  for (;;) {
    const ssize_t n = ::read(in, buf, sizeof(buf));
    if (n < 0) {
      status = Status::FromErrno(errno, "read " + from);
      break;
    }
    if (n == 0) break;
    if (::write(out, buf, static_cast<size_t>(n)) != n) {
      status = Status::FromErrno(errno, "write " + to);
      break;
    }
  }
  ::close(in);
  ::close(out);
  return status;
}

// Makes `to` a symlink with the same target as `from`.
Status CopySymlink(const std::string& from, const std::string& to) {
  char target[4096];
  const ssize_t n = ::readlink(from.c_str(), target, sizeof(target) - 1);
  if (n < 0) return Status::FromErrno(errno, "readlink " + from);
  if (::symlink(std::string(target, static_cast<size_t>(n)).c_str(), to.c_str()) != 0) {
    return Status::FromErrno(errno, "symlink " + to);
  }
  return Status::Ok();
}

// Copies a host /etc entry: directories recursively, regular files with
// their permission bits (never set-id), symlinks as they are; anything else
// and the secrets are left out, and so is what this user cannot read.
Status CopyEtcEntry(const std::string& host, const std::string& to, const std::string& relative) {
  for (const char* secret : kHostEtcSecrets) {
    if (relative == secret) return Status::Ok();
  }
  struct stat st {};
  if (::lstat(host.c_str(), &st) != 0) return Status::Ok();  // vanished meanwhile
  if (S_ISLNK(st.st_mode)) return CopySymlink(host, to);
  if (S_ISREG(st.st_mode)) {
    if (::access(host.c_str(), R_OK) != 0) return Status::Ok();
    return CopyFile(host, to, st.st_mode & 0777);
  }
  if (!S_ISDIR(st.st_mode)) return Status::Ok();
  if (::mkdir(to.c_str(), st.st_mode & 0777) != 0) return Status::FromErrno(errno, "mkdir " + to);
  DIR* dir = ::opendir(host.c_str());
  if (dir == nullptr) return errno == EACCES ? Status::Ok() : Status::FromErrno(errno, "opendir " + host);
  Status status;
  while (status.ok()) {
    const struct dirent* entry = ::readdir(dir);
    if (entry == nullptr) break;
    const std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    status = CopyEtcEntry(host + "/" + name, to + "/" + name, relative + "/" + name);
  }
  ::closedir(dir);
  return status;
}

// The host image's lower layer: the top-level directories, the host's
// An /etc/shadow with every account of the copied /etc/passwd locked and
// without password aging: the host's password hashes never enter a
// sandbox, yet PAM's account check (pam_unix, which su runs after
// pam_rootok) finds each user and lets root inside become it. Without an
// entry pam_unix asks its set-gid helper, inert under no_new_privs, and su
// fails with "Authentication failure".
Status WriteLockedShadow(const std::string& etc) {
  std::ifstream passwd(etc + "/passwd");
  std::string shadow, line;
  while (std::getline(passwd, line)) {
    const size_t colon = line.find(':');
    if (colon != std::string::npos && colon > 0) shadow += line.substr(0, colon) + ":*:::::::\n";
  }
  return WriteWholeFile(etc + "/shadow", shadow, 0600);
}

// /bin, /lib, ... symlinks (merged /usr) and copies of the allowlisted /etc
// entries. Binding each /etc file at every start cost ~70 mount calls
// (1.5 ms); the copies cost nothing per start.
Status BuildHostSkeleton(const std::string& tmp) {
  for (const char* dir : kHostSkeletonDirs) {
    FR_RETURN_IF_ERROR(MakeDirs(tmp + "/" + dir, 0755));
  }
  FR_RETURN_IF_ERROR(MakeDirs(tmp + "/var/tmp", 0755));
  if (::chmod((tmp + "/var/tmp").c_str(), 01777) != 0) return Status::FromErrno(errno, "chmod " + tmp + "/var/tmp");
  for (const char* top : kHostTop) {
    const std::string host = std::string("/") + top;
    struct stat st {};
    if (::lstat(host.c_str(), &st) != 0) continue;
    const std::string inside = tmp + "/" + top;
    if (S_ISLNK(st.st_mode)) {
      FR_RETURN_IF_ERROR(CopySymlink(host, inside));
    } else if (S_ISDIR(st.st_mode)) {
      FR_RETURN_IF_ERROR(MakeDirs(inside, 0755));  // the host's directory is bound here at start
    }
  }
  for (const char* entry : kHostEtc) {
    struct stat st {};
    const std::string host = std::string("/etc/") + entry;
    if (::stat(host.c_str(), &st) != 0) continue;  // absent on this host (or a dangling link)
    // Followed like the binds this replaces: /etc/localtime and friends are
    // often symlinks into /usr or /etc/alternatives.
    if (S_ISREG(st.st_mode)) {
      if (::access(host.c_str(), R_OK) == 0) FR_RETURN_IF_ERROR(CopyFile(host, tmp + "/etc/" + entry, st.st_mode & 0777));
    } else if (S_ISDIR(st.st_mode)) {
      FR_RETURN_IF_ERROR(CopyEtcEntry(host + "/.", tmp + "/etc/" + entry, entry));
    }
  }
  return WriteLockedShadow(tmp + "/etc");
}

Result<std::string> EnsureHostSkeleton() {
  FR_ASSIGN_OR_RETURN(std::string cache, ImageCacheDir());
  Result<std::string> dir = EnsureTree(cache + "/host-" + HostSkeletonKey(), BuildHostSkeleton);
  if (!dir.ok()) return dir.status().Wrap("host image");
  return dir;
}

Status AddHostImage(ImageLayout* layout) {
  FR_ASSIGN_OR_RETURN(layout->lower, EnsureHostSkeleton());
  layout->ops.push_back(BindOp("/usr", "usr", /*read_only=*/true));
  for (const char* top : kHostTop) {
    const std::string host = std::string("/") + top;
    struct stat st {};
    if (::lstat(host.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) layout->ops.push_back(BindOp(host, top, true));
  }
  return Status::Ok();
}

// Builds the busybox tree in EnsureTree's temporary directory.
Status BuildBusyboxTree(const std::string& tmp) {
  if (::access("/bin/busybox", X_OK) != 0) {
    return Status::NotFound("/bin/busybox not found (install Debian's busybox-static)");
  }
  for (const char* dir : {"/bin", "/sbin", "/usr", "/usr/bin", "/usr/sbin", "/etc", "/dev", "/proc", "/tmp",
                          "/root", "/home", "/var", "/run"}) {
    FR_RETURN_IF_ERROR(MakeDirs(tmp + dir, 0755));
  }
  if (::chmod((tmp + "/tmp").c_str(), 01777) != 0) return Status::FromErrno(errno, "chmod " + tmp + "/tmp");
  FR_RETURN_IF_ERROR(CopyFile("/bin/busybox", tmp + "/bin/busybox", 0755));
  FR_RETURN_IF_ERROR(WriteWholeFile(tmp + "/etc/passwd", "root:x:0:0:root:/root:/bin/sh\n", 0644));
  FR_RETURN_IF_ERROR(WriteWholeFile(tmp + "/etc/group", "root:x:0:\n", 0644));
  FILE* list = ::popen("/bin/busybox --list-full", "re");
  if (list == nullptr) return Status::FromErrno(errno, "popen /bin/busybox --list-full");
  char line[512];
  Status status;
  int applets = 0;
  while (status.ok() && std::fgets(line, sizeof(line), list) != nullptr) {
    std::string applet(line);
    while (!applet.empty() && (applet.back() == '\n' || applet.back() == '\r')) applet.pop_back();
    if (applet.empty() || applet == "bin/busybox" || applet.find("..") != std::string::npos) continue;
    const std::string link = tmp + "/" + applet;
    status = MakeDirs(link.substr(0, link.rfind('/')), 0755);
    if (status.ok() && ::symlink("/bin/busybox", link.c_str()) != 0 && errno != EEXIST) {
      status = Status::FromErrno(errno, "symlink " + link);
    }
    ++applets;
  }
  const int rc = ::pclose(list);
  FR_RETURN_IF_ERROR(status);
  if (rc != 0 || applets == 0) return Status::IoError("/bin/busybox --list-full failed (exit status " + std::to_string(rc) + ")");
  return Status::Ok();
}

Status EnsureBusyboxImage() {
  return EnsureTree(kBusyboxImageDir, BuildBusyboxTree).status().Wrap("busybox image");
}

}  // namespace

Result<ImageLayout> ResolveImage(const SandboxSpec& spec) {
  ImageLayout layout;
  switch (spec.image) {
    case ImageKind::kHost:
      FR_RETURN_IF_ERROR(AddHostImage(&layout));
      break;
    case ImageKind::kBusybox:
      FR_RETURN_IF_ERROR(EnsureBusyboxImage());
      layout.lower = kBusyboxImageDir;
      break;
    case ImageKind::kDirectory: {
      struct stat st {};
      if (::stat(spec.image_dir.c_str(), &st) != 0) return Status::FromErrno(errno, "image: stat " + spec.image_dir);
      if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument("image " + spec.image_dir + ": not a directory");
      if (IsOciLayout(spec.image_dir)) {
        Result<std::string> root = EnsureOciImage(spec.image_dir, spec.image_ref, OciImageOptions());
        if (!root.ok()) return root.status().Wrap("image " + spec.image_dir);
        layout.lower = *root;
        Result<ImageDefaults> defaults = OciImageDefaults(spec.image_dir, spec.image_ref);
        if (!defaults.ok()) return defaults.status().Wrap("image " + spec.image_dir);
        layout.defaults = *defaults;
      } else {
        layout.lower = spec.image_dir;
      }
      break;
    }
  }
  return layout;
}

}  // namespace flashroll::sandbox
