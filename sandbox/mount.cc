#include "sandbox/mount.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <set>

#include "sandbox/image.h"

namespace flashroll::sandbox {

namespace {

constexpr char kScratch[] = "/run/flashroll";
constexpr char kUserScratch[] = "/mnt";  // see PrepareMountsParentSide

MountOp Creating(MountOp::Kind kind, const std::string& path) {
  MountOp op;
  op.kind = kind;
  op.path = path;
  const size_t slash = path.rfind('/');
  op.parent = slash == std::string::npos ? "" : path.substr(0, slash);
  op.name = slash == std::string::npos ? path : path.substr(slash + 1);
  return op;
}

MountOp MknodOp(const std::string& path, unsigned major, unsigned minor) {
  MountOp op = Creating(MountOp::Kind::kMknod, path);
  op.mode = 0666;
  op.dev = makedev(major, minor);
  return op;
}

MountOp FsOp(const std::string& path, const char* fstype, unsigned long flags, const std::string& data) {
  MountOp op;
  op.kind = MountOp::Kind::kMount;
  op.path = path;
  op.fstype = fstype;
  op.flags = flags;
  op.data = data;
  return op;
}

MountOp BindSelfOp(const std::string& source, const std::string& path, bool read_only) {
  MountOp op;
  op.kind = MountOp::Kind::kBindSelf;
  op.path = path;
  op.source = source;
  op.read_only = read_only;
  op.optional = true;
  return op;
}

void AddDev(bool rootless, std::vector<MountOp>* ops) {
  ops->push_back(MkdirOp("dev", 0755));
  ops->push_back(FsOp("dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64m,nr_inodes=4096"));
  struct Device {
    const char* name;
    unsigned major, minor;
  };
  for (const Device& dev : {Device{"null", 1, 3}, Device{"zero", 1, 5}, Device{"full", 1, 7},
                            Device{"random", 1, 8}, Device{"urandom", 1, 9}, Device{"tty", 5, 0}}) {
    const std::string path = std::string("dev/") + dev.name;
    if (!rootless) {
      ops->push_back(MknodOp(path, dev.major, dev.minor));
      continue;
    }
    // mknod is not allowed in a user namespace (and a tmpfs mounted there
    // is nodev): bind the host's node instead.
    ops->push_back(TouchOp(path));
    ops->push_back(BindOp("/dev/" + std::string(dev.name), path, false));
  }
  ops->push_back(SymlinkOp("dev/fd", "/proc/self/fd"));
  ops->push_back(SymlinkOp("dev/stdin", "/proc/self/fd/0"));
  ops->push_back(SymlinkOp("dev/stdout", "/proc/self/fd/1"));
  ops->push_back(SymlinkOp("dev/stderr", "/proc/self/fd/2"));
  ops->push_back(MkdirOp("dev/shm", 01777));
  ops->push_back(MkdirOp("dev/pts", 0755));
  ops->push_back(FsOp("dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"));
  ops->push_back(SymlinkOp("dev/ptmx", "pts/ptmx"));
}

// /proc of the sandbox's pid namespace, with the host-wide knobs that plain
// uid 0 could still write (sysrq-trigger, sysctls) made read-only and the
// kernel-memory views, the kernel's build config and ACPI masked, as Docker
// does.
void AddProc(std::vector<MountOp>* ops) {
  ops->push_back(MkdirOp("proc", 0555));
  ops->push_back(FsOp("proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, ""));
  for (const char* masked : {"kcore", "keys", "kmsg", "latency_stats", "timer_list", "sched_debug", "config.gz"}) {
    ops->push_back(BindSelfOp("dev/null", std::string("proc/") + masked, true));
  }
  // A directory is masked by an empty read-only tmpfs: /proc/acpi's files
  // (wakeup, for one) act on the host's hardware.
  MountOp acpi = FsOp("proc/acpi", "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0555");
  acpi.optional = true;
  ops->push_back(std::move(acpi));
  for (const char* ro : {"sys", "sysrq-trigger", "irq", "bus", "fs"}) {
    const std::string path = std::string("proc/") + ro;
    ops->push_back(BindSelfOp(path, path, true));
  }
}

// Binds the held rw path at the same path inside. Where this process may
// mount, the tree is cloned here from the held descriptor: a child in a new
// mount namespace can no longer clone a mount of the host's namespace, but
// it can attach a detached clone made before it.
Status AddReadWriteBind(const std::shared_ptr<const HeldPath>& held, bool rootless, MountPlan* plan) {
  const std::string rel = held->path.substr(1);
  for (size_t pos = rel.find('/'); pos != std::string::npos; pos = rel.find('/', pos + 1)) {
    plan->ops.push_back(MkdirOp(rel.substr(0, pos), 0755));
  }
  plan->ops.push_back(S_ISDIR(held->mode) ? MkdirOp(rel, 0755) : TouchOp(rel));
  MountOp op;
  op.kind = MountOp::Kind::kBindHeld;
  op.path = rel;
  op.source = held->path;
  op.held_dev = held->dev;
  op.held_ino = held->ino;
  if (!rootless) {
    auto tree = std::make_shared<UniqueFd>(
        ::open_tree(held->fd.get(), "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE));
    if (!tree->valid()) return Status::FromErrno(errno, "rw path " + held->path + ": open_tree(OPEN_TREE_CLONE)");
    // Private, as a bind made after the child's MS_REC|MS_PRIVATE would be:
    // the clone of a shared mount joins its peer group, and host mounts
    // made later beneath the path would appear inside.
    struct mount_attr attr {};
    attr.propagation = MS_PRIVATE;
    if (::mount_setattr(tree->get(), "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof(attr)) != 0) {
      return Status::FromErrno(errno, "rw path " + held->path + ": mount_setattr(MS_PRIVATE)");
    }
    op.held_tree_fd = tree->get();
    plan->held_trees.push_back(std::move(tree));
  }
  plan->held_paths.push_back(held);
  plan->ops.push_back(std::move(op));
  return Status::Ok();
}

// --- child side: raw system calls only ---

int OpenInRoot(int root_fd, const std::string& rel, int flags) {
  struct open_how how {};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  return static_cast<int>(::syscall(SYS_openat2, root_fd, rel.empty() ? "." : rel.c_str(), &how, sizeof(how)));
}

// Writes "/proc/self/fd/<fd>" into `buf`, which must hold 32 bytes.
const char* FdPath(int fd, char* buf) {
  const char prefix[] = "/proc/self/fd/";
  size_t n = 0;
  for (; prefix[n] != '\0'; ++n) buf[n] = prefix[n];
  char digits[12];
  int d = 0;
  do {
    digits[d++] = static_cast<char>('0' + fd % 10);
    fd /= 10;
  } while (fd > 0);
  while (d > 0) buf[n++] = digits[--d];
  buf[n] = '\0';
  return buf;
}

ChildStatus Fail(const char* call, const MountOp& op) { return ChildStatus::Errno("mount", call, op.path.c_str()); }

// Hands what the child just made to the sandbox's root (kMapped; nothing
// when the plan has no owner): `name` in `dir`, or `dir` itself when `name`
// is empty.
int GiveToSandboxRoot(const MountPlan& plan, int dir, const char* name) {
  if (plan.owner_uid == 0) return 0;
  const int flags = AT_SYMLINK_NOFOLLOW | (name[0] == '\0' ? AT_EMPTY_PATH : 0);
  return ::fchownat(dir, name, plan.owner_uid, plan.owner_gid, flags);
}

// Returns a detached clone of the tree at `source`, idmapped through
// `userns_fd` and restricted by `attrs` (MOUNT_ATTR_*), or -1 with errno
// and the failed call in `*call`. mount_setattr idmaps only mounts no one
// has seen yet, hence the clone; AT_RECURSIVE takes submounts along.
int IdmappedTree(const char* source, int userns_fd, uint64_t attrs, const char** call) {
  *call = "open_tree(OPEN_TREE_CLONE)";
  const int tree = ::open_tree(AT_FDCWD, source, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
  if (tree < 0) return -1;
  struct mount_attr attr {};
  attr.attr_set = MOUNT_ATTR_IDMAP | attrs;
  attr.userns_fd = static_cast<uint64_t>(userns_fd);
  if (::mount_setattr(tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof(attr)) != 0) {
    *call = "mount_setattr(MOUNT_ATTR_IDMAP)";
    const int err = errno;
    ::close(tree);
    errno = err;
    return -1;
  }
  return tree;
}

// Attaches the detached tree `tree` at the directory open as `target` and
// closes it.
int AttachTree(int tree, int target) {
  const int rc = ::move_mount(tree, "", target, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH);
  const int err = errno;
  ::close(tree);
  errno = err;
  return rc;
}

// Makes the bind mount now at `path`, and every mount beneath it, nosuid and
// nodev, and read-only when op.read_only: a set-uid file or a device node in
// a bound host directory, --rw ones included, gives nothing inside.
// mount_setattr(AT_RECURSIVE) reaches the submounts a recursive bind
// brought along, which a remount of the top mount would leave as they were.
// A bind of one character device (/dev/null in a user namespace, where
// mknod is not allowed, and the /dev/null masking /proc files) keeps it
// usable: nodev would make it refuse every open.
ChildStatus RestrictBind(int root_fd, const MountOp& op) {
  const int fd = OpenInRoot(root_fd, op.path, O_PATH);
  if (fd < 0) return Fail("openat2", op);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return Fail("fstat", op);
  }
  struct mount_attr attr {};
  attr.attr_set = MOUNT_ATTR_NOSUID | (S_ISCHR(st.st_mode) ? 0 : MOUNT_ATTR_NODEV) |
                  (op.read_only ? MOUNT_ATTR_RDONLY : 0);
  const int rc = ::mount_setattr(fd, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof(attr));
  const ChildStatus status = rc == 0 ? ChildStatus::Ok() : Fail("mount_setattr(NOSUID|NODEV)", op);
  ::close(fd);
  return status;
}

// True when `fd` is the held path of `op` (the same inode on the same
// device; the held descriptor keeps the inode number from being reused).
bool IsHeldInode(int fd, const MountOp& op) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 && st.st_dev == op.held_dev && st.st_ino == op.held_ino;
}

// Binds the held rw path of `op` at the directory open as `target`: its
// detached clone, or (rootless) the path reopened in this namespace
// without following symlinks, only when it is still the held inode.
int BindHeld(const MountOp& op, int target, const char** call) {
  if (op.held_tree_fd >= 0) {
    *call = "move_mount";
    return ::move_mount(op.held_tree_fd, "", target, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH);
  }
  struct open_how how {};
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  *call = "openat2(RESOLVE_NO_SYMLINKS)";
  const int source = static_cast<int>(::syscall(SYS_openat2, AT_FDCWD, op.source.c_str(), &how, sizeof(how)));
  if (source < 0) return -1;
  int rc = -1;
  if (!IsHeldInode(source, op)) {
    *call = "not the checked inode";
    errno = ESTALE;
  } else {
    char source_path[32];
    char target_path[32];
    *call = "mount(MS_BIND)";
    rc = ::mount(FdPath(source, source_path), FdPath(target, target_path), nullptr, MS_BIND | MS_REC, nullptr);
  }
  const int err = errno;
  ::close(source);
  errno = err;
  return rc;
}

// What got mounted at op.path must be the held inode, whichever way it was
// bound: the last word before anything runs there.
ChildStatus VerifyHeldBind(int root_fd, const MountOp& op) {
  const int fd = OpenInRoot(root_fd, op.path, O_PATH);
  if (fd < 0) return Fail("openat2(bound)", op);
  const bool same = IsHeldInode(fd, op);
  ::close(fd);
  if (same) return ChildStatus::Ok();
  errno = ESTALE;
  return Fail("bound tree is not the checked inode", op);
}

ChildStatus ApplyCreate(const MountPlan& plan, int root_fd, const MountOp& op) {
  const int dir = OpenInRoot(root_fd, op.parent, O_PATH | O_DIRECTORY);
  if (dir < 0) return Fail("openat2(parent)", op);
  int rc = 0;
  const char* call = "";
  switch (op.kind) {
    case MountOp::Kind::kMkdir:
      call = "mkdirat";
      rc = ::mkdirat(dir, op.name.c_str(), op.mode);
      break;
    case MountOp::Kind::kTouch: {
      call = "openat(O_CREAT)";
      const int fd = ::openat(dir, op.name.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, op.mode);
      rc = fd < 0 ? -1 : ::close(fd);
      break;
    }
    case MountOp::Kind::kSymlink:
      call = "symlinkat";
      rc = ::symlinkat(op.source.c_str(), dir, op.name.c_str());
      break;
    case MountOp::Kind::kMknod:
      call = "mknodat";
      rc = ::mknodat(dir, op.name.c_str(), S_IFCHR | op.mode, op.dev);
      break;
    default:
      break;
  }
  ChildStatus status = (rc == 0 || errno == EEXIST) ? ChildStatus::Ok() : Fail(call, op);
  // What existed already comes from the (idmapped) image.
  if (rc == 0 && GiveToSandboxRoot(plan, dir, op.name.c_str()) != 0) status = Fail("fchownat", op);
  ::close(dir);
  return status;
}

ChildStatus ApplyMount(const MountPlan& plan, int root_fd, const MountOp& op) {
  const int target = OpenInRoot(root_fd, op.path, O_PATH);
  if (target < 0) {
    if (op.optional && errno == ENOENT) return ChildStatus::Ok();
    return Fail("openat2", op);
  }
  char target_path[32];
  FdPath(target, target_path);
  int rc = 0;
  const char* call = "mount";
  if (op.kind == MountOp::Kind::kMount) {
    rc = ::mount(op.fstype.c_str(), target_path, op.fstype.c_str(), op.flags, op.data.c_str());
  } else if (op.kind == MountOp::Kind::kBind && op.idmap && plan.idmap_userns_fd >= 0) {
    const uint64_t attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (op.read_only ? MOUNT_ATTR_RDONLY : 0);
    const int tree = IdmappedTree(op.source.c_str(), plan.idmap_userns_fd, attrs, &call);
    if (tree < 0) {
      rc = -1;
    } else {
      call = "move_mount";
      rc = AttachTree(tree, target);
    }
  } else if (op.kind == MountOp::Kind::kBindHeld) {
    rc = BindHeld(op, target, &call);
  } else if (op.kind == MountOp::Kind::kBind) {
    call = "mount(MS_BIND)";
    rc = ::mount(op.source.c_str(), target_path, nullptr, MS_BIND | MS_REC, nullptr);
  } else {
    call = "mount(MS_BIND)";
    const int source = OpenInRoot(root_fd, op.source, O_PATH);
    if (source < 0) {
      rc = -1;
      call = "openat2(source)";
    } else {
      char source_path[32];
      rc = ::mount(FdPath(source, source_path), target_path, nullptr, MS_BIND, nullptr);
      const int err = errno;
      ::close(source);
      errno = err;
    }
  }
  const int err = errno;
  ::close(target);
  if (rc != 0) {
    errno = err;
    if (op.optional && err == ENOENT) return ChildStatus::Ok();
    return Fail(call, op);
  }
  if (op.kind == MountOp::Kind::kMount) {
    if (op.fstype != "tmpfs" || plan.owner_uid == 0 || (op.flags & MS_RDONLY) != 0) return ChildStatus::Ok();
    // The new tmpfs's root, not the directory beneath it.
    const int mounted = OpenInRoot(root_fd, op.path, O_PATH | O_DIRECTORY);
    if (mounted < 0) return Fail("openat2(tmpfs)", op);
    const int chowned = GiveToSandboxRoot(plan, mounted, "");
    ::close(mounted);
    return chowned == 0 ? ChildStatus::Ok() : Fail("fchownat(tmpfs)", op);
  }
  // An idmapped tree got its restrictions with its idmap.
  if (op.kind == MountOp::Kind::kBind && op.idmap && plan.idmap_userns_fd >= 0) return ChildStatus::Ok();
  if (op.kind == MountOp::Kind::kBindHeld) {
    const ChildStatus held = VerifyHeldBind(root_fd, op);
    if (!held.ok()) return held;
  }
  return RestrictBind(root_fd, op);
}

}  // namespace

MountOp MkdirOp(const std::string& path, mode_t mode) {
  MountOp op = Creating(MountOp::Kind::kMkdir, path);
  op.mode = mode;
  return op;
}

MountOp TouchOp(const std::string& path) {
  MountOp op = Creating(MountOp::Kind::kTouch, path);
  op.mode = 0644;
  return op;
}

MountOp SymlinkOp(const std::string& path, const std::string& target) {
  MountOp op = Creating(MountOp::Kind::kSymlink, path);
  op.source = target;
  return op;
}

MountOp BindOp(const std::string& host_source, const std::string& path, bool read_only) {
  MountOp op;
  op.kind = MountOp::Kind::kBind;
  op.path = path;
  op.source = host_source;
  op.read_only = read_only;
  return op;
}

Result<MountPlan> PrepareMountsParentSide(const SandboxSpec& spec, UsernsMode userns) {
  const bool rootless = userns == UsernsMode::kRootless;
  MountPlan plan;
  if (rootless) {
    // Without root, /run/flashroll cannot be created; the tmpfs goes over an
    // existing directory instead (only in the sandbox's mount namespace).
    struct stat st {};
    plan.scratch = ::stat(kUserScratch, &st) == 0 && S_ISDIR(st.st_mode) ? kUserScratch : "/tmp";
  } else {
    if (::mkdir(kScratch, 0700) != 0 && errno != EEXIST) {
      return Status::FromErrno(errno, std::string("mkdir ") + kScratch);
    }
    plan.scratch = kScratch;
  }
  FR_ASSIGN_OR_RETURN(ImageLayout image, ResolveImage(spec));
  plan.tmpfs_data = "size=" + std::to_string(spec.disk_bytes) + ",mode=0755";
  plan.upper = plan.scratch + "/upper";
  const std::string work = plan.scratch + "/work";
  plan.new_root = plan.scratch + "/root";
  plan.scratch_dirs = {plan.upper, work, plan.new_root};
  std::string lower = image.lower;
  if (lower.empty() || userns == UsernsMode::kMapped) {
    lower = plan.scratch + "/lower";
    plan.scratch_dirs.push_back(lower);
  }
  if (!image.lower.empty() && userns == UsernsMode::kMapped) {
    plan.lower_source = image.lower;
    plan.idmapped_lower = lower;
  }
  plan.overlay_data = "lowerdir=" + lower + ",upperdir=" + plan.upper + ",workdir=" + work;
  plan.ops = std::move(image.ops);
  plan.image_defaults = std::move(image.defaults);
  // The image's own binds show the host's files with the owners they have
  // in the image (read-only: the host image's /usr and friends).
  for (MountOp& op : plan.ops) op.idmap = op.kind == MountOp::Kind::kBind && userns == UsernsMode::kMapped;
  AddDev(rootless, &plan.ops);
  AddProc(&plan.ops);
  plan.ops.push_back(MkdirOp("tmp", 01777));
  if (!spec.rw_held.empty() && spec.rw_held.size() != spec.rw_paths.size()) {
    return Status::Internal("rw paths: " + std::to_string(spec.rw_held.size()) + " held descriptors for " +
                            std::to_string(spec.rw_paths.size()) + " paths");
  }
  for (size_t i = 0; i < spec.rw_paths.size(); ++i) {
    std::shared_ptr<const HeldPath> held;
    if (spec.rw_held.empty()) {
      FR_ASSIGN_OR_RETURN(held, HoldHostPath(spec.rw_paths[i]));
    } else {
      held = spec.rw_held[i];
      if (held->path != spec.rw_paths[i]) {
        return Status::Internal("rw path " + spec.rw_paths[i] + ": held as " + held->path);
      }
    }
    FR_RETURN_IF_ERROR(AddReadWriteBind(held, rootless, &plan));
  }
  // The writable layer's trees: its top-level directories, less what is a
  // read-only bind of the host (the host image's /usr) and less symlinks
  // (the host image's /bin -> usr/bin: a Landlock rule follows it).
  std::set<std::string> entries;
  if (!image.lower.empty()) {
    DIR* dir = ::opendir(image.lower.c_str());
    if (dir == nullptr) return Status::FromErrno(errno, "opendir " + image.lower);
    while (const dirent* entry = ::readdir(dir)) {
      const std::string name = entry->d_name;
      struct stat st {};
      if (name == "." || name == ".." || ::fstatat(::dirfd(dir), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        continue;
      }
      if (!S_ISLNK(st.st_mode)) entries.insert(name);
    }
    ::closedir(dir);
  }
  for (const auto& op : plan.ops) {
    if (!op.path.empty() && op.path.find('/') == std::string::npos && op.kind != MountOp::Kind::kSymlink) {
      entries.insert(op.path);
    }
  }
  for (const auto& op : plan.ops) {
    if (op.kind == MountOp::Kind::kBind && op.read_only) entries.erase(op.path);
  }
  plan.writable_root_entries.assign(entries.begin(), entries.end());
  return plan;
}

ChildStatus MountChild(const MountPlan& plan) {
  ::umask(0);
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return ChildStatus::Errno("mount", "mount(MS_REC|MS_PRIVATE)", "/");
  }
  if (plan.disk_mount_fd >= 0) {
    if (::move_mount(plan.disk_mount_fd, "", AT_FDCWD, plan.scratch.c_str(), MOVE_MOUNT_F_EMPTY_PATH) != 0) {
      return ChildStatus::Errno("mount", "move_mount(disk)", plan.scratch.c_str());
    }
  } else if (::mount("tmpfs", plan.scratch.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, plan.tmpfs_data.c_str()) != 0) {
    return ChildStatus::Errno("mount", "mount(tmpfs)", plan.scratch.c_str());
  }
  for (const auto& dir : plan.scratch_dirs) {
    if (::mkdir(dir.c_str(), 0755) != 0) return ChildStatus::Errno("mount", "mkdir", dir.c_str());
  }
  // The overlay's root is the upper layer's: the sandbox's root owns "/".
  if (GiveToSandboxRoot(plan, AT_FDCWD, plan.upper.c_str()) != 0) {
    return ChildStatus::Errno("mount", "fchownat", plan.upper.c_str());
  }
  if (!plan.lower_source.empty()) {
    const char* call = nullptr;
    const int tree = IdmappedTree(plan.lower_source.c_str(), plan.idmap_userns_fd,
                                  MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, &call);
    if (tree < 0) return ChildStatus::Errno("mount", call, plan.lower_source.c_str());
    const int target = ::open(plan.idmapped_lower.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (target < 0) {
      ::close(tree);
      return ChildStatus::Errno("mount", "open", plan.idmapped_lower.c_str());
    }
    const int rc = AttachTree(tree, target);
    ::close(target);
    if (rc != 0) return ChildStatus::Errno("mount", "move_mount", plan.idmapped_lower.c_str());
  }
  if (::mount("overlay", plan.new_root.c_str(), "overlay", MS_NOSUID | MS_NODEV, plan.overlay_data.c_str()) != 0) {
    return ChildStatus::Errno("mount", "mount(overlay)", plan.overlay_data.c_str());
  }
  const int root_fd = ::open(plan.new_root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root_fd < 0) return ChildStatus::Errno("mount", "open", plan.new_root.c_str());
  for (const auto& op : plan.ops) {
    const bool creates = op.kind == MountOp::Kind::kMkdir || op.kind == MountOp::Kind::kTouch ||
                         op.kind == MountOp::Kind::kSymlink || op.kind == MountOp::Kind::kMknod;
    const ChildStatus status = creates ? ApplyCreate(plan, root_fd, op) : ApplyMount(plan, root_fd, op);
    if (!status.ok()) return status;
  }
  ::close(root_fd);
  // pivot_root(".", ".") stacks the old root on the new one; detaching it
  // leaves only the sandbox's tree, with no directory needed for the old root.
  if (::chdir(plan.new_root.c_str()) != 0) return ChildStatus::Errno("mount", "chdir", plan.new_root.c_str());
  if (::syscall(SYS_pivot_root, ".", ".") != 0) return ChildStatus::Errno("mount", "pivot_root", plan.new_root.c_str());
  if (::umount2(".", MNT_DETACH) != 0) return ChildStatus::Errno("mount", "umount2(MNT_DETACH)", "old root");
  if (::chdir("/") != 0) return ChildStatus::Errno("mount", "chdir", "/");
  ::umask(022);
  return ChildStatus::Ok();
}

}  // namespace flashroll::sandbox
