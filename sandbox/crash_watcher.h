// CrashWatcher: notices when a sandbox crashes and reports it as a
// repercussion event (events.h), within milliseconds.
//
// One thread per manager waits in epoll on, for every sandbox:
//   - the init's control socket and pidfd: the socket hangs up as soon as
//     PID 1 dies (its descriptors close early in exit, before the kernel
//     tears down the sandbox's mounts, which can take tens of ms), the
//     pidfd once it has fully exited; whichever comes first is reported as
//     init_exit (PID 1 never exits on its own in a healthy sandbox, and a
//     process inside cannot kill it), after which the manager destroys the
//     sandbox;
//   - the cgroup's OOM notifier (cgroup.h): reported as oom when the
//     kernel's OOM kill count went up;
//   - an inotify watch on the essential directories of the sandbox's root
//     (/, /bin, /sbin, /lib*, /usr, /usr/bin, /usr/sbin, /usr/lib) where
//     they live in its writable layer. Deleting or moving away an entry of
//     those directories (or of an essential top-level name in /), or
//     writing or renaming over sh, bash, busybox, env, the dynamic loader
//     or libc, is reported as rootfs_damage, once per path.
// Why inotify and not a check after each exec: the event is raised while
// the damaging command still runs (a long job that deletes /usr/bin is
// reported at once, not when it ends), its cost is nothing until a watched
// directory changes, and the kernel delivers it synchronously with the
// unlink/rename, so the latency is the watcher thread's wake-up (tens of
// microseconds). Directories that are read-only binds of host paths (the
// host image's /usr) are not watched: they cannot change from inside, and
// a watch there would report the host's own package updates.
//
// Thread safety: Watch and Unwatch may be called from any thread. Once
// Unwatch(id) returns, the watcher no longer touches that sandbox's
// descriptors or cgroup, so they may be closed.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "sandbox/cgroup.h"
#include "sandbox/events.h"
#include "sandbox/unique_fd.h"

namespace flashroll::sandbox {

class CrashWatcher {
 public:
  // Events go to `log`; `on_init_exit(id)` runs on the watcher thread (with
  // no watcher lock held) after an init_exit event, to tear the sandbox
  // down. Returns the running watcher or the failed epoll/inotify call.
  static Result<std::unique_ptr<CrashWatcher>> Start(EventLog* log,
                                                     std::function<void(const std::string&)> on_init_exit);
  ~CrashWatcher();  // stops and joins the thread
  CrashWatcher(const CrashWatcher&) = delete;
  CrashWatcher& operator=(const CrashWatcher&) = delete;

  // Starts watching the sandbox `id`: its init's pidfd and control socket
  // (only for hang-up; its data is left to the exec path), its cgroup's OOM
  // notifier and its root (reached through /proc/<init_pid>/root). `pidfd`,
  // `control` and `cgroup` must stay valid until Unwatch(id). Returns OK, or
  // the failed call (nothing stays registered then).
  Status Watch(const std::string& id, int pidfd, int control, pid_t init_pid, Cgroup* cgroup);

  // Stops watching `id` (a no-op for an unknown id).
  void Unwatch(const std::string& id);

 private:
  struct Watched;

  CrashWatcher(EventLog* log, std::function<void(const std::string&)> on_init_exit, UniqueFd epoll,
               UniqueFd inotify, UniqueFd wake);
  void Loop();
  void HandleInotify();
  void HandleOom(Watched& watched);
  void UnwatchLocked(const std::string& id);

  EventLog* const log_;
  const std::function<void(const std::string&)> on_init_exit_;
  const UniqueFd epoll_;
  const UniqueFd inotify_;
  const UniqueFd wake_;  // eventfd: stop the loop

  std::mutex mu_;  // held while handling events and by Watch/Unwatch
  uint64_t next_token_ = 0;  // 0 and 1 are the inotify fd and the stop eventfd; guarded by mu_
  std::map<std::string, std::unique_ptr<Watched>> by_id_;  // guarded by mu_
  std::map<uint64_t, Watched*> by_token_;                  // epoll data -> sandbox; guarded by mu_
  std::map<int, std::pair<Watched*, std::string>> by_wd_;  // inotify wd -> sandbox, dir; guarded by mu_
  std::thread thread_;
};

}  // namespace flashroll::sandbox
