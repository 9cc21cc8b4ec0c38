// Workspace disks: each named workspace beneath a node's workspace_root is
// a filesystem of its own, so what sandboxes write through rw binds into it
// is bounded in bytes and inodes on disk, and one sandbox cannot fill the
// filesystem that holds the store and the checkpoints.
//
// This kernel has no project quotas (disk.h), so a workspace is an ext4
// image file of its own, <images>/<name>.img (sparse: it takes on disk what
// is written in it), journaled, on an autoclearing loop device, mounted at
// <root>/<name> (nosuid, nodev) in the manager's mount namespace. The image
// outlives the manager: a manager that starts again adopts a workspace still
// mounted (its loop device's backing file is the image) and mounts one that
// is not (after a reboot). Remove unmounts it (lazily: sandboxes binding it
// keep their binds until they exit) and deletes the image.
//
// A bind is bounded by the workspace it lies in, not by the sandbox's own
// `disk` (which bounds its writable root): sandboxes sharing a workspace
// share its bytes. Holds() is what the node policy checks an rw path's held
// descriptor against: the device its inode is on must be the workspace's.
//
// Needs root (loop devices, mounts).
//
// Thread safety: every method may be called from several threads at once.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"

namespace flashroll::sandbox {

inline constexpr char kWorkspaceImageDir[] = "/var/lib/flashroll/workspaces";
inline constexpr size_t kMaxWorkspaceName = 64;

struct WorkspaceDisk {
  std::string name;
  std::string path;       // <root>/<name>, where it is mounted
  std::string device;     // "/dev/loopN"
  uint64_t bytes = 0;     // its size
  uint64_t used_bytes = 0;
  uint64_t inodes = 0;
  uint64_t used_inodes = 0;
};

class WorkspaceDisks {
 public:
  // The workspaces of `root` (a canonical directory) whose images are in
  // `images` (made if missing), each mounted or adopted. kFailedPrecondition
  // naming a workspace whose mount point holds something else.
  static Result<std::unique_ptr<WorkspaceDisks>> Open(const std::string& root, const std::string& images);

  // A new workspace of `bytes`: kInvalidArgument for a name that is not
  // [a-z0-9][a-z0-9._-]* of at most 64 characters, kAlreadyExists when the
  // name is taken (a workspace, or anything at <root>/<name>).
  Result<WorkspaceDisk> Create(const std::string& name, uint64_t bytes);
  // kNotFound for an unknown name.
  Status Remove(const std::string& name);
  Result<WorkspaceDisk> Get(const std::string& name) const;
  std::vector<WorkspaceDisk> List() const;

  // Whether `device` (an inode's st_dev) is workspace `name`'s filesystem.
  bool Holds(const std::string& name, dev_t device) const;

  const std::string& root() const { return root_; }

 private:
  struct Entry {
    dev_t device = 0;
    std::string loop;
  };
  WorkspaceDisks(std::string root, std::string images) : root_(std::move(root)), images_(std::move(images)) {}
  Status Attach(const std::string& name);
  WorkspaceDisk Describe(const std::string& name, const Entry& entry) const;

  const std::string root_;
  const std::string images_;
  mutable std::mutex mu_;
  std::map<std::string, Entry> workspaces_;  // guarded by mu_
};

// Checks a workspace name (kInvalidArgument naming `field`).
Status CheckWorkspaceName(const std::string& name, const std::string& field);

}  // namespace flashroll::sandbox
