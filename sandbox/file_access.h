// File reads and writes inside a sandbox, done as the sandbox would do them.
//
// The files API (Manager::GetFile and PutFile) must not act with the
// manager's privileges: as root with every capability it reads what the
// sandbox cannot (/proc/kallsyms with real kernel addresses, files its user
// may not open), and a FIFO or a filesystem that never answers would hang
// it. So every operation runs in a short-lived helper process, cloned from
// the manager, which:
//   - joins the init's namespaces through its pidfd: user, mount (its root
//     and working directory become the sandbox's), UTS, IPC, network and
//     cgroup, so that files whose contents
//     depend on the reader's namespaces (/proc/sys/kernel/hostname,
//     /proc/sysvipc/*, /proc/sys/net/*, /proc/<pid>/cgroup) read as they do
//     inside. Not the pid namespace: a process enters one only by being
//     forked into it, and staying out keeps the helper, a copy of the
//     manager's memory, out of sight of the sandbox's processes;
//   - becomes the sandbox's root, uid and gid 0 of its user namespace (its
//     processes run as that, minus capabilities: caps.h): the range's base
//     on the host for a root manager, whose helper clears its supplementary
//     groups and joins the user namespace after the others (which the
//     host's user namespace owns, userns.h); the manager's own ids for a
//     rootless one, whose user namespace owns the others and is joined
//     with them. It then drops every capability;
//   - resolves the path from the init's root directory, a descriptor the
//     manager took (not the root setns leaves the helper in: that is the
//     top of the namespace's mount tree, which need not be the init's
//     root), with openat2 (RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
//     O_NOFOLLOW): ".." stops at that root, symlinks, absolute ones too,
//     resolve inside it, and a symlink as the last component is refused;
//   - looks at the path with O_PATH and fstat before opening it, and refuses
//     anything but a regular file (FIFO, device, socket, directory,
//     symlink) without opening it: opening a FIFO wakes whoever waits at its
//     other end, opening a device may act on it. The real open (O_NONBLOCK,
//     O_NOCTTY) is checked again, for a path swapped in between.
// The helper closes every descriptor it inherited but its own few: a copy
// kept open would, for one, keep a concurrent exec's output pipe from
// reaching EOF. The caller waits for it up to a timeout, then SIGKILLs it.
//
// Why a helper process rather than a request to the sandbox's init over its
// control socket (init_protocol.h): files may be read and written while the
// sandbox is frozen, when its init cannot answer; and that socket carries a
// running exec's messages, which a file transfer would have to interleave
// with.
// The helper does not take on the sandbox's Landlock domain or seccomp
// filter: the files API writes where the sandbox's own processes may not
// (an existing file directly under "/", for one), as it always has. What it
// can reach is the sandbox's own mount tree, as its user without
// capabilities.
//
// Thread safety: OpenFileTarget needs the caller to keep the init from being
// reaped meanwhile (the sandbox's lock); the rest may run on any thread,
// concurrently, with no lock held.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <string_view>

#include "common/status.h"
#include "sandbox/unique_fd.h"
#include "sandbox/userns.h"

namespace flashroll::sandbox {

// What a file operation needs of a sandbox; owns its descriptors, so the
// operation is unaffected by the sandbox being destroyed meanwhile (it then
// fails or works on what is left, and the helper's namespaces go with it).
struct FileTarget {
  UniqueFd pidfd;  // a duplicate of the init's pidfd: the namespaces to join
  UniqueFd root;   // the init's root directory (O_PATH), where paths resolve
  UsernsMode userns = UsernsMode::kNone;  // how the sandbox got its user namespace
};

// Takes what a file operation needs from a running init; cheap and
// non-blocking (nothing of the sandbox's is read). The init must not be
// reaped while this runs. Returns the failed call (e.g. open
// /proc/<pid>/root) otherwise.
Result<FileTarget> OpenFileTarget(pid_t init_pid, int init_pidfd, UsernsMode userns);

// Reads the regular file `path` (absolute, as the sandbox sees it).
// Returns its contents, or:
//   kInvalidArgument: a relative path or one with a NUL; not a regular file
//     ("path /tmp/f: a fifo, not a regular file"); a symlink loop or a
//     magic link on the way;
//   kResourceExhausted: longer than max_bytes;
//   kDeadlineExceeded: not done within `timeout` (the helper is killed);
//   kUnavailable: the init has exited;
//   otherwise the failed call's errno status, e.g. kNotFound for "open
//   /tmp/absent: No such file or directory", kPermissionDenied for a file
//   the sandbox's user may not read.
Result<std::string> ReadFileAsSandbox(const FileTarget& target, const std::string& path, size_t max_bytes,
                                      std::chrono::milliseconds timeout);

// Creates or truncates the regular file `path` with `mode` (less the
// manager's umask, when created) and writes `data` to it. Parent
// directories must exist. A `mode` with the set-uid or set-gid bit is
// kInvalidArgument, before anything is touched. Errors as
// ReadFileAsSandbox (but no kResourceExhausted other than the
// filesystem's own ENOSPC).
Status WriteFileAsSandbox(const FileTarget& target, const std::string& path, std::string_view data, mode_t mode,
                          std::chrono::milliseconds timeout);

}  // namespace flashroll::sandbox
