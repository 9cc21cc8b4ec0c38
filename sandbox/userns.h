// The user namespace step: who uid 0 inside a sandbox is on the host.
//
// Every sandbox runs in a user namespace of its own, in one of two ways:
//
//   kMapped    the manager is root. Uid and gid 0..count-1 inside map to a
//              host range given to this sandbox alone (uid_ranges.h), so
//              root inside is an unprivileged uid outside. The parent makes
//              the namespace before the clone (UserNamespace::Create: a
//              short-lived holder process cloned into it, whose uid_map and
//              gid_map the parent writes) and hands its descriptor to the
//              child, which does its mounts as real root — the image's
//              layers and binds idmapped through this namespace (mount.h),
//              so the host's root-owned files show as root inside — and joins
//              it last, after pivot_root and the network set-up
//              (JoinUserNamespaceChild). The sandbox's other namespaces
//              (mount, pid, network, UTS, IPC, cgroup) stay owned by the
//              host's user namespace: the sandbox's root holds no capability
//              over them even before caps.h drops its capabilities.
//   kRootless  the manager is not root. The init is cloned into a new user
//              namespace that owns all the others, and uid and gid 0 inside
//              map to the manager's own ids (WriteIdMaps, written by the
//              parent after the clone).
//
// kNone (no user namespace) is what a plain process has; the manager never
// starts a sandbox so.
//
// Thread safety: UserNamespace::Create and WriteIdMaps may run on several
// threads at once; JoinUserNamespaceChild runs only in the cloned child.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "common/status.h"
#include "sandbox/child_status.h"
#include "sandbox/unique_fd.h"

namespace flashroll::sandbox {

enum class UsernsMode { kNone, kMapped, kRootless };

// `count` consecutive host ids from `base`: ids 0..count-1 inside.
struct IdRange {
  uint32_t base = 0;
  uint32_t count = 0;
};

// Whether processes of a user namespace may call setgroups(2).
//   kDeny   what an unprivileged writer of the maps must choose (kRootless).
//   kAllow  for a root manager's sandboxes (kMapped), so that su, setpriv
//           --init-groups and daemons dropping privileges can set their
//           groups. The kernel denies it to unprivileged map writers because
//           a process could drop a group it holds and so escape a "negative"
//           group permission (a mode such as 0604 that denies its group what
//           it grants others). Here the trade-off is small: the sandbox's
//           processes start with no supplementary group (the host's root's
//           are cleared before the join), only root inside (CAP_SETGID) can
//           call setgroups and it already passes such checks with
//           CAP_DAC_OVERRIDE, and the gids it can set are its own range's,
//           which no host file uses to deny anyone anything.
enum class Setgroups { kDeny, kAllow };

// Writes /proc/<pid>/setgroups and the uid and gid maps "0 <base> <count>"
// of the process `pid`'s user namespace. Returns the file that could not be
// opened or written.
Status WriteIdMaps(pid_t pid, const IdRange& uids, const IdRange& gids, Setgroups setgroups);

// A fresh user namespace whose ids 0..count-1 are `range` on the host, for
// uids and gids alike; setgroups is allowed in it (Setgroups::kAllow). Owns the
// namespace's descriptor (the namespace lives while it, or a process in it,
// does). Move-only; a default-constructed one holds nothing.
class UserNamespace {
 public:
  UserNamespace() = default;
  UserNamespace(UserNamespace&&) noexcept = default;
  UserNamespace& operator=(UserNamespace&&) noexcept = default;

  // Needs CAP_SETUID and CAP_SETGID (root) to map a range not its own.
  // Returns the failed call (clone, a map write, the open of ns/user).
  static Result<UserNamespace> Create(const IdRange& range);

  int fd() const { return fd_.get(); }
  const IdRange& range() const { return range_; }

 private:
  UniqueFd fd_;
  IdRange range_;
};

// Child side of kMapped, after every step that needs the host's root (the
// mounts, the veth's addresses, the cgroup namespace): clears the
// supplementary groups (the host's root's groups would otherwise stay in
// force inside), joins the namespace `userns_fd` and becomes its uid and gid
// 0. A negative `userns_fd` does nothing.
ChildStatus JoinUserNamespaceChild(int userns_fd);

}  // namespace flashroll::sandbox
