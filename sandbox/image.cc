#include "sandbox/image.h"

#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <random>

#include "sandbox/oci_image.h"
#include "sandbox/oci_layout.h"

namespace flashroll::sandbox {

namespace {

// The /etc entries a host-image sandbox sees: name resolution, the dynamic
// linker, TLS roots, locale and time, shells, python and git configuration.
constexpr const char* kHostEtc[] = {
    "passwd",        "group",         "hosts",         "resolv.conf",    "nsswitch.conf", "host.conf",
    "gai.conf",      "ld.so.cache",   "ld.so.conf",    "ld.so.conf.d",   "localtime",     "timezone",
    "ssl",           "ca-certificates", "ca-certificates.conf", "alternatives", "os-release",
    "debian_version", "gitconfig",    "profile",       "profile.d",      "bash.bashrc",   "inputrc",
    "mime.types",    "protocols",     "services",      "environment",    "shells",        "python3",
    "python3.11",    "login.defs",    "magic",         "magic.mime",     "mailcap",       "terminfo",
};

constexpr const char* kHostTop[] = {"bin", "lib", "lib32", "lib64", "libx32", "sbin"};

Status AddHostImage(ImageLayout* layout) {
  layout->ops.push_back(MkdirOp("usr", 0755));
  layout->ops.push_back(BindOp("/usr", "usr", /*read_only=*/true));
  for (const char* top : kHostTop) {
    const std::string host = std::string("/") + top;
    struct stat st {};
    if (::lstat(host.c_str(), &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      char target[4096];
      const ssize_t n = ::readlink(host.c_str(), target, sizeof(target) - 1);
      if (n < 0) return Status::FromErrno(errno, "host image: readlink " + host);
      layout->ops.push_back(SymlinkOp(top, std::string(target, static_cast<size_t>(n))));
    } else if (S_ISDIR(st.st_mode)) {
      layout->ops.push_back(MkdirOp(top, 0755));
      layout->ops.push_back(BindOp(host, top, true));
    }
  }
  layout->ops.push_back(MkdirOp("etc", 0755));
  for (const char* entry : kHostEtc) {
    const std::string host = std::string("/etc/") + entry;
    struct stat st {};
    if (::stat(host.c_str(), &st) != 0) continue;  // absent on this host (or a dangling link)
    const std::string inside = std::string("etc/") + entry;
    if (S_ISDIR(st.st_mode)) {
      layout->ops.push_back(MkdirOp(inside, 0755));
    } else if (S_ISREG(st.st_mode)) {
      layout->ops.push_back(TouchOp(inside));
    } else {
      continue;
    }
    layout->ops.push_back(BindOp(host, inside, true));
  }
  for (const char* dir : {"root", "home", "var", "var/tmp", "run", "mnt", "opt", "srv"}) {
    layout->ops.push_back(MkdirOp(dir, std::string(dir) == "var/tmp" ? 01777 : 0755));
  }
  return Status::Ok();
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

Status MakeDirs(const std::string& path, mode_t mode) {
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos == path.size() || path[pos] == '/') {
      const std::string prefix = path.substr(0, pos);
      if (::mkdir(prefix.c_str(), mode) != 0 && errno != EEXIST) return Status::FromErrno(errno, "mkdir " + prefix);
    }
  }
  return Status::Ok();
}

void RemoveTree(const std::string& path) {
  ::nftw(
      path.c_str(),
      [](const char* p, const struct stat*, int, struct FTW*) {
        ::remove(p);  // best effort: a leftover temporary tree is harmless
        return 0;
      },
      16,
      FTW_DEPTH | FTW_PHYS);
}

// Builds the busybox tree in a temporary directory next to the final one.
Status BuildBusyboxTree(const std::string& tmp) {
  for (const char* dir : {"", "/bin", "/sbin", "/usr", "/usr/bin", "/usr/sbin", "/etc", "/dev", "/proc", "/tmp",
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
  const std::string dir = kBusyboxImageDir;
  if (::access((dir + "/bin/busybox").c_str(), X_OK) == 0) return Status::Ok();
  if (::access("/bin/busybox", X_OK) != 0) {
    return Status::NotFound("busybox image: /bin/busybox not found (install Debian's busybox-static)");
  }
  const std::string parent = dir.substr(0, dir.rfind('/'));
  FR_RETURN_IF_ERROR(MakeDirs(parent, 0755));
  std::random_device rd;
  const std::string tmp = parent + "/.busybox-" + std::to_string(::getpid()) + "-" + std::to_string(rd());
  Status status = BuildBusyboxTree(tmp);
  if (status.ok() && ::rename(tmp.c_str(), dir.c_str()) != 0) {
    // Another process finished first: its tree is as good as ours.
    if (errno != EEXIST && errno != ENOTEMPTY) status = Status::FromErrno(errno, "rename " + tmp + " to " + dir);
  }
  RemoveTree(tmp);
  return status.Wrap("busybox image");
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
      } else {
        layout.lower = spec.image_dir;
      }
      break;
    }
  }
  return layout;
}

}  // namespace flashroll::sandbox
