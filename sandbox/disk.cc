#include "sandbox/disk.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>

#include "sandbox/ext4_image.h"

namespace flashroll::sandbox {

Result<SandboxDisk> SandboxDisk::Create(uint64_t bytes) {
  FR_ASSIGN_OR_RETURN(std::string template_path, EnsureExt4Template(bytes, Ext4Kind::kScratch));
  for (const char* dir : {"/var/lib/flashroll", kDiskImageDir}) {
    if (::mkdir(dir, 0700) != 0 && errno != EEXIST) return Status::FromErrno(errno, std::string("disk: mkdir ") + dir);
  }
  // A nameless file: its blocks are freed when the loop device lets go.
  UniqueFd image(::open(kDiskImageDir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  if (!image.valid()) return Status::FromErrno(errno, std::string("disk: open(O_TMPFILE) in ") + kDiskImageDir);
  FR_RETURN_IF_ERROR(CopyExt4Template(template_path, image.get(), bytes));
  FR_ASSIGN_OR_RETURN(LoopDevice loop, AttachLoop(image.get()));
  SandboxDisk disk;
  disk.device_ = loop.path;
  // Once mounted, the mount holds the device; closing ours lets it detach
  // with the mount.
  FR_ASSIGN_OR_RETURN(disk.mount_, MountExt4Detached(loop.path));
  return disk;
}

}  // namespace flashroll::sandbox
