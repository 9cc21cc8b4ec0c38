#include "sandbox/crash_watcher.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "common/log.h"

namespace flashroll::sandbox {

namespace {

// Directories watched (relative to the sandbox root; "" is the root).
constexpr const char* kWatchedDirs[] = {"",    "bin",     "sbin",     "lib",     "lib64",
                                        "usr", "usr/bin", "usr/sbin", "usr/lib", "usr/lib64"};
// Names in "/" whose loss is damage (other top-level entries are the
// sandbox's own business: /tmp, /home, ...).
constexpr const char* kEssentialTop[] = {"bin", "sbin", "lib", "lib64", "lib32", "usr", "etc"};
// Files whose replacement is damage wherever they sit in a watched directory.
constexpr const char* kEssentialFiles[] = {"sh", "bash", "busybox", "env", "ld-linux-x86-64.so.2", "libc.so.6"};
constexpr size_t kMaxDamageReports = 16;  // per sandbox

constexpr uint32_t kDirMask = IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_MODIFY | IN_DELETE_SELF | IN_MOVE_SELF |
                              IN_ONLYDIR | IN_DONT_FOLLOW;

bool OneOf(const std::string& name, const auto& list) {
  for (const char* entry : list) {
    if (name == entry) return true;
  }
  return false;
}

// A sandbox's epoll tokens are base + kind; bases are multiples of 4.
enum Kind : uint64_t { kPidfd = 0, kOom = 1, kControl = 2 };

}  // namespace

struct CrashWatcher::Watched {
  std::string id;
  uint64_t token = 0;
  int pidfd = -1;
  int control = -1;
  Cgroup* cgroup = nullptr;
  Cgroup::OomNotifier oom;
  uint64_t oom_kills = 0;  // last reported count
  std::vector<int> wds;
  std::set<std::string> damage_reported;
  bool init_exited = false;
};

Result<std::unique_ptr<CrashWatcher>> CrashWatcher::Start(EventLog* log,
                                                          std::function<void(const std::string&)> on_init_exit) {
  UniqueFd epoll(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll.valid()) return Status::FromErrno(errno, "crash watcher: epoll_create1");
  UniqueFd inotify(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (!inotify.valid()) return Status::FromErrno(errno, "crash watcher: inotify_init1");
  UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return Status::FromErrno(errno, "crash watcher: eventfd");
  epoll_event ev {};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;  // token 0: the inotify fd
  if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, inotify.get(), &ev) != 0) {
    return Status::FromErrno(errno, "crash watcher: epoll_ctl(ADD inotify)");
  }
  ev.data.u64 = 1;  // token 1: wake
  if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, wake.get(), &ev) != 0) {
    return Status::FromErrno(errno, "crash watcher: epoll_ctl(ADD eventfd)");
  }
  std::unique_ptr<CrashWatcher> watcher(
      new CrashWatcher(log, std::move(on_init_exit), std::move(epoll), std::move(inotify), std::move(wake)));
  CrashWatcher* raw = watcher.get();
  watcher->thread_ = std::thread([raw] { raw->Loop(); });
  return watcher;
}

CrashWatcher::CrashWatcher(EventLog* log, std::function<void(const std::string&)> on_init_exit, UniqueFd epoll,
                           UniqueFd inotify, UniqueFd wake)
    : log_(log),
      on_init_exit_(std::move(on_init_exit)),
      epoll_(std::move(epoll)),
      inotify_(std::move(inotify)),
      wake_(std::move(wake)) {}

CrashWatcher::~CrashWatcher() {
  const uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  while (!by_id_.empty()) UnwatchLocked(by_id_.begin()->first);
}

Status CrashWatcher::Watch(const std::string& id, int pidfd, int control, pid_t init_pid, Cgroup* cgroup) {
  auto watched = std::make_unique<Watched>();
  watched->id = id;
  watched->pidfd = pidfd;
  watched->control = control;
  watched->cgroup = cgroup;
  FR_ASSIGN_OR_RETURN(watched->oom, cgroup->OpenOomNotifier());
  FR_ASSIGN_OR_RETURN(watched->oom_kills, cgroup->OomKillCount());

  // The root as the sandbox sees it; essential directories resolved inside
  // it without following symlinks, and only where they are on the root's
  // own file system (not a read-only bind of a host path).
  const std::string root_path = "/proc/" + std::to_string(init_pid) + "/root";
  UniqueFd root(::open(root_path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root.valid()) return Status::FromErrno(errno, "crash watcher: open " + root_path);
  struct stat root_st {};
  if (::fstat(root.get(), &root_st) != 0) return Status::FromErrno(errno, "crash watcher: fstat " + root_path);
  std::vector<std::pair<UniqueFd, std::string>> dirs;
  for (const char* dir : kWatchedDirs) {
    UniqueFd fd;
    if (dir[0] == '\0') {
      fd.reset(::fcntl(root.get(), F_DUPFD_CLOEXEC, 0));
    } else {
      open_how how {};
      how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
      how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
      fd.reset(static_cast<int>(::syscall(SYS_openat2, root.get(), dir, &how, sizeof(how))));
    }
    if (!fd.valid()) continue;  // absent, or a symlink (its entry in "/" is watched)
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0 || st.st_dev != root_st.st_dev) continue;
    dirs.emplace_back(std::move(fd), std::string("/") + dir);
  }

  std::lock_guard<std::mutex> lock(mu_);
  if (by_id_.count(id) != 0) return Status::AlreadyExists("crash watcher: " + id + " is already watched");
  Watched* w = watched.get();
  w->token = (next_token_ += 4);
  by_id_[id] = std::move(watched);
  by_token_[w->token] = w;
  auto fail = [&](const Status& status) {
    UnwatchLocked(id);
    return status;
  };
  epoll_event ev {};
  ev.events = EPOLLIN;
  ev.data.u64 = w->token + kPidfd;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, pidfd, &ev) != 0) {
    const int err = errno;
    w->pidfd = -1;
    return fail(Status::FromErrno(err, "crash watcher: epoll_ctl(ADD pidfd) for " + id));
  }
  // Hang-up only: EPOLLHUP is always reported, EPOLLRDHUP asked for, and
  // without EPOLLIN the exec path's replies do not wake the watcher.
  ev.events = EPOLLRDHUP;
  ev.data.u64 = w->token + kControl;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, control, &ev) != 0) {
    const int err = errno;
    w->control = -1;
    return fail(Status::FromErrno(err, "crash watcher: epoll_ctl(ADD control socket) for " + id));
  }
  ev.events = w->oom.events;
  ev.data.u64 = w->token + kOom;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, w->oom.fd.get(), &ev) != 0) {
    const int err = errno;
    w->oom.fd.reset();
    return fail(Status::FromErrno(err, "crash watcher: epoll_ctl(ADD oom notifier) for " + id));
  }
  for (auto& [fd, dir] : dirs) {
    const std::string path = "/proc/self/fd/" + std::to_string(fd.get());
    const int wd = ::inotify_add_watch(inotify_.get(), path.c_str(), kDirMask & ~IN_DONT_FOLLOW);
    if (wd < 0) return fail(Status::FromErrno(errno, "crash watcher: inotify_add_watch " + dir + " of " + id));
    w->wds.push_back(wd);
    by_wd_[wd] = {w, dir};
  }
  return Status::Ok();
}

void CrashWatcher::Unwatch(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  UnwatchLocked(id);
}

void CrashWatcher::UnwatchLocked(const std::string& id) {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return;
  Watched* w = it->second.get();
  if (w->pidfd >= 0) (void)::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, w->pidfd, nullptr);
  if (w->control >= 0) (void)::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, w->control, nullptr);
  if (w->oom.fd.valid()) (void)::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, w->oom.fd.get(), nullptr);
  for (int wd : w->wds) {
    (void)::inotify_rm_watch(inotify_.get(), wd);
    by_wd_.erase(wd);
  }
  by_token_.erase(w->token);
  by_id_.erase(it);
}

void CrashWatcher::HandleOom(Watched& w) {
  DrainOomNotifier(w.oom);
  // The notification can precede the kill's accounting by a moment: look
  // again briefly before deciding there was no kill.
  for (int attempt = 0; attempt < 20; ++attempt) {
    Result<uint64_t> kills = w.cgroup->OomKillCount();
    if (!kills.ok()) return;
    if (*kills > w.oom_kills) {
      const uint64_t added = *kills - w.oom_kills;
      w.oom_kills = *kills;
      log_->Emit(w.id, EventKind::kOom,
                 "the kernel OOM-killed " + std::to_string(added) + " process(es); " + std::to_string(*kills) +
                     " in total");
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void CrashWatcher::HandleInotify() {
  alignas(inotify_event) char buf[8192];
  for (;;) {
    const ssize_t n = ::read(inotify_.get(), buf, sizeof(buf));
    if (n <= 0) return;
    for (ssize_t off = 0; off < n;) {
      const auto* event = reinterpret_cast<const inotify_event*>(buf + off);
      off += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
      auto it = by_wd_.find(event->wd);
      if (it == by_wd_.end()) continue;
      Watched& w = *it->second.first;
      const std::string& dir = it->second.second;
      const std::string name = event->len > 0 ? std::string(event->name) : std::string();
      std::string damage;
      if (event->mask & (IN_DELETE_SELF | IN_MOVE_SELF)) {
        damage = dir + " deleted or moved";
      } else if (event->mask & (IN_DELETE | IN_MOVED_FROM)) {
        if (dir != "/" || OneOf(name, kEssentialTop)) damage = (dir == "/" ? "" : dir) + "/" + name + " deleted";
      } else if (event->mask & (IN_MOVED_TO | IN_MODIFY)) {
        if (OneOf(name, kEssentialFiles)) damage = (dir == "/" ? "" : dir) + "/" + name + " replaced";
      }
      if (damage.empty() || w.damage_reported.size() >= kMaxDamageReports) continue;
      if (!w.damage_reported.insert(damage).second) continue;
      log_->Emit(w.id, EventKind::kRootfsDamage, damage);
    }
  }
}

void CrashWatcher::Loop() {
  epoll_event events[64];
  for (;;) {
    const int n = ::epoll_wait(epoll_.get(), events, 64, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      log::Error("crash watcher: epoll_wait failed", {{"error", std::strerror(errno)}});
      return;
    }
    std::vector<std::string> exited;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int i = 0; i < n; ++i) {
        const uint64_t data = events[i].data.u64;
        if (data == 1) return;  // stop
        if (data == 0) {
          HandleInotify();
          continue;
        }
        auto it = by_token_.find(data & ~uint64_t{3});
        if (it == by_token_.end()) continue;  // unwatched meanwhile
        Watched& w = *it->second;
        if ((data & 3) == kOom) {
          HandleOom(w);
          continue;
        }
        if (w.init_exited) continue;
        w.init_exited = true;
        (void)::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, w.pidfd, nullptr);
        (void)::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, w.control, nullptr);
        siginfo_t info {};
        // At the control socket's hang-up the exit status is usually not
        // known yet.
        std::string detail = "PID 1 died";
        if (::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(w.pidfd), &info,
                     WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid != 0) {
          detail = info.si_code == CLD_EXITED ? "PID 1 exited with status " + std::to_string(info.si_status)
                                              : "PID 1 killed by signal " + std::to_string(info.si_status);
        }
        // A kill during Destroy also ends the init; Destroy unwatches first,
        // so an event here is a crash. OOM first: a kill of the init by the
        // OOM killer should read as oom, then init_exit.
        HandleOom(w);
        log_->Emit(w.id, EventKind::kInitExit, detail);
        exited.push_back(w.id);
      }
    }
    for (const auto& id : exited) on_init_exit_(id);
  }
}

}  // namespace flashroll::sandbox
