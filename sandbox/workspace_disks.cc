#include "sandbox/workspace_disks.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>

#include "sandbox/ext4_image.h"
#include "sandbox/unique_fd.h"

namespace flashroll::sandbox {

namespace {

constexpr uint64_t kMinWorkspaceBytes = uint64_t{16} << 20;  // room for ext4's journal and tables

Result<UniqueFd> OpenDir(int dirfd, const std::string& name, const std::string& what) {
  UniqueFd fd(::openat(dirfd, name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno(errno, "workspace: open " + what);
  return fd;
}

Result<struct stat> Stat(int fd, const std::string& what) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::FromErrno(errno, "workspace: fstat " + what);
  return st;
}

// The file the loop device `device` (a block device number) reads, as sysfs
// names it; empty when it is no loop device.
std::string LoopBackingFile(dev_t device) {
  std::ifstream in("/sys/dev/block/" + std::to_string(major(device)) + ":" + std::to_string(minor(device)) +
                   "/loop/backing_file");
  std::string path;
  std::getline(in, path);
  return path;
}

}  // namespace

Status CheckWorkspaceName(const std::string& name, const std::string& field) {
  bool ok = !name.empty() && name.size() <= kMaxWorkspaceName;
  for (size_t i = 0; ok && i < name.size(); ++i) {
    const char c = name[i];
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    ok = alnum || (i > 0 && (c == '.' || c == '_' || c == '-'));
  }
  if (!ok) {
    return Status::InvalidArgument(field + ": workspace name '" + name + "' must be [a-z0-9][a-z0-9._-]* of at most " +
                                   std::to_string(kMaxWorkspaceName) + " characters");
  }
  return Status::Ok();
}

Result<std::unique_ptr<WorkspaceDisks>> WorkspaceDisks::Open(const std::string& root, const std::string& images) {
  for (size_t slash = images.find('/', 1); ; slash = images.find('/', slash + 1)) {
    const std::string prefix = images.substr(0, slash);
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) {
      return Status::FromErrno(errno, "workspace: mkdir " + prefix);
    }
    if (slash == std::string::npos) break;
  }
  std::unique_ptr<WorkspaceDisks> disks(new WorkspaceDisks(root, images));
  struct CloseDir {
    void operator()(DIR* d) const { ::closedir(d); }
  };
  std::unique_ptr<DIR, CloseDir> dir(::opendir(images.c_str()));
  if (dir == nullptr) return Status::FromErrno(errno, "workspace: opendir " + images);
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(dir.get())) {
    const std::string file = entry->d_name;
    if (file.size() <= 4 || !file.ends_with(".img")) continue;  // ".", "..", a half-made NAME.img.tmp
    const std::string name = file.substr(0, file.size() - 4);
    if (CheckWorkspaceName(name, images + "/" + file).ok()) names.push_back(name);
  }
  std::lock_guard<std::mutex> lock(disks->mu_);
  for (const std::string& name : names) FR_RETURN_IF_ERROR(disks->Attach(name));
  return disks;
}

// Mounts workspace `name`'s image at <root>/<name>, or adopts the mount
// already there when its loop device reads that image. Holds mu_.
Status WorkspaceDisks::Attach(const std::string& name) {
  const std::string image_path = images_ + "/" + name + ".img";
  const std::string mount_path = root_ + "/" + name;
  UniqueFd root(::open(root_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root.valid()) return Status::FromErrno(errno, "workspace: open " + root_);
  FR_ASSIGN_OR_RETURN(struct stat root_st, Stat(root.get(), root_));
  if (::mkdirat(root.get(), name.c_str(), 0755) != 0 && errno != EEXIST) {
    return Status::FromErrno(errno, "workspace: mkdir " + mount_path);
  }
  FR_ASSIGN_OR_RETURN(UniqueFd point, OpenDir(root.get(), name, mount_path));
  FR_ASSIGN_OR_RETURN(struct stat point_st, Stat(point.get(), mount_path));
  Entry entry;
  if (point_st.st_dev != root_st.st_dev) {
    // Mounted already: by a manager before this one, if it reads our image.
    if (LoopBackingFile(point_st.st_dev) != image_path) {
      return Status::FailedPrecondition("workspace " + name + ": " + mount_path +
                                        " is a mount of something else than " + image_path);
    }
    entry.device = point_st.st_dev;
    entry.loop = "/dev/loop" + std::to_string(minor(point_st.st_dev));
    workspaces_[name] = entry;
    return Status::Ok();
  }
  UniqueFd image(::open(image_path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW));
  if (!image.valid()) return Status::FromErrno(errno, "workspace: open " + image_path);
  FR_ASSIGN_OR_RETURN(LoopDevice loop, AttachLoop(image.get()));
  FR_ASSIGN_OR_RETURN(struct stat loop_st, Stat(loop.fd.get(), loop.path));
  FR_ASSIGN_OR_RETURN(UniqueFd mount, MountExt4Detached(loop.path));
  // Onto the directory opened above, not onto whatever the path names now.
  if (::move_mount(mount.get(), "", point.get(), "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) != 0) {
    return Status::FromErrno(errno, "workspace: move_mount " + loop.path + " onto " + mount_path);
  }
  FR_ASSIGN_OR_RETURN(UniqueFd mounted, OpenDir(root.get(), name, mount_path));
  FR_ASSIGN_OR_RETURN(struct stat mounted_st, Stat(mounted.get(), mount_path));
  if (mounted_st.st_dev != loop_st.st_rdev) {
    return Status::IoError("workspace " + name + ": " + mount_path + " is not on " + loop.path +
                           " after mounting it there");
  }
  entry.device = mounted_st.st_dev;
  entry.loop = loop.path;
  workspaces_[name] = entry;
  return Status::Ok();
}

Result<WorkspaceDisk> WorkspaceDisks::Create(const std::string& name, uint64_t bytes) {
  FR_RETURN_IF_ERROR(CheckWorkspaceName(name, "name"));
  if (bytes < kMinWorkspaceBytes) {
    return Status::InvalidArgument("disk: a workspace needs at least 16M, got " + std::to_string(bytes) + " bytes");
  }
  bytes = (bytes + 4095) / 4096 * 4096;
  std::lock_guard<std::mutex> lock(mu_);
  const std::string mount_path = root_ + "/" + name;
  struct stat st {};
  if (workspaces_.count(name) || ::lstat(mount_path.c_str(), &st) == 0) {
    return Status::AlreadyExists("workspace " + name + ": " + mount_path + " exists");
  }
  const std::string image_path = images_ + "/" + name + ".img";
  const std::string tmp = image_path + ".tmp";
  FR_ASSIGN_OR_RETURN(std::string template_path, EnsureExt4Template(bytes, Ext4Kind::kJournaled));
  {
    UniqueFd image(::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!image.valid()) return Status::FromErrno(errno, "workspace: create " + tmp);
    Status copied = CopyExt4Template(template_path, image.get(), bytes);
    if (copied.ok() && ::fsync(image.get()) != 0) copied = Status::FromErrno(errno, "workspace: fsync " + tmp);
    if (copied.ok() && ::rename(tmp.c_str(), image_path.c_str()) != 0) {
      copied = Status::FromErrno(errno, "workspace: rename " + tmp);
    }
    if (!copied.ok()) {
      ::unlink(tmp.c_str());
      return copied;
    }
  }
  Status attached = Attach(name);
  if (attached.ok()) {
    // Its root, for every sandbox that binds it: their users are mapped to
    // host ids of their own.
    attached = ::chmod(mount_path.c_str(), 0777) == 0 ? Status::Ok()
                                                       : Status::FromErrno(errno, "workspace: chmod " + mount_path);
  }
  if (!attached.ok()) {
    if (workspaces_.erase(name)) ::umount2(mount_path.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW);
    ::rmdir(mount_path.c_str());
    ::unlink(image_path.c_str());
    return attached;
  }
  return Describe(name, workspaces_.at(name));
}

Status WorkspaceDisks::Remove(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = workspaces_.find(name);
  if (it == workspaces_.end()) return Status::NotFound("workspace " + name + ": no such workspace disk");
  const std::string mount_path = root_ + "/" + name;
  struct stat st {};
  if (::lstat(mount_path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_dev != it->second.device) {
    return Status::FailedPrecondition("workspace " + name + ": " + mount_path + " is no longer its mount");
  }
  // Lazily: a sandbox binding it keeps its bind until it exits; the loop
  // device detaches and the image's blocks are freed after the last.
  if (::umount2(mount_path.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) != 0) {
    return Status::FromErrno(errno, "workspace: umount " + mount_path);
  }
  workspaces_.erase(it);
  ::rmdir(mount_path.c_str());
  const std::string image_path = images_ + "/" + name + ".img";
  if (::unlink(image_path.c_str()) != 0) return Status::FromErrno(errno, "workspace: unlink " + image_path);
  return Status::Ok();
}

WorkspaceDisk WorkspaceDisks::Describe(const std::string& name, const Entry& entry) const {
  WorkspaceDisk disk;
  disk.name = name;
  disk.path = root_ + "/" + name;
  disk.device = entry.loop;
  struct statvfs vfs {};
  if (::statvfs(disk.path.c_str(), &vfs) == 0) {
    disk.bytes = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize;
    disk.used_bytes = static_cast<uint64_t>(vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize;
    disk.inodes = vfs.f_files;
    disk.used_inodes = vfs.f_files - vfs.f_ffree;
  }
  return disk;
}

Result<WorkspaceDisk> WorkspaceDisks::Get(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = workspaces_.find(name);
  if (it == workspaces_.end()) return Status::NotFound("workspace " + name + ": no such workspace disk");
  return Describe(name, it->second);
}

std::vector<WorkspaceDisk> WorkspaceDisks::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<WorkspaceDisk> list;
  for (const auto& [name, entry] : workspaces_) list.push_back(Describe(name, entry));
  return list;
}

bool WorkspaceDisks::Holds(const std::string& name, dev_t device) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = workspaces_.find(name);
  return it != workspaces_.end() && it->second.device == device;
}

}  // namespace flashroll::sandbox
