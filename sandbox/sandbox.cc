#include "sandbox/sandbox.h"

#include <arpa/inet.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "common/log.h"
#include "sandbox/apparmor.h"
#include "sandbox/apparmor_profile.h"
#include "sandbox/bpf_pins.h"
#include "sandbox/cgroup.h"
#include "sandbox/cgroup_backends.h"
#include "sandbox/contain.h"
#include "sandbox/crash_watcher.h"
#include "sandbox/device_policy.h"
#include "sandbox/disk.h"
#include "sandbox/events.h"
#include "sandbox/exec.h"
#include "sandbox/file_access.h"
#include "sandbox/kept.h"
#include "sandbox/launcher.h"
#include "sandbox/naming.h"
#include "sandbox/netns_pool.h"
#include "sandbox/net_policy.h"
#include "sandbox/reaper.h"
#include "sandbox/reclaim.h"
#include "sandbox/uid_ranges.h"
#include "sandbox/userns.h"
#include "sandbox/veth.h"
#include "sandbox/manager_impl.h"

namespace flashroll::sandbox {

// Removes what is left of a sandbox. Nothing protective goes while a
// process of it may still run: first everything is killed and the init
// reaped (the kernel reaps a pid namespace's init after its last process),
// then the veth, the network policy (its links and pins) and the cgroups
// go. Each step skips what an earlier attempt removed, so a failed teardown
// can simply be called again (reaper.h); the wait for the init is bounded
// by `reap_timeout`, so an attempt always returns.
Status TearDown(Sandbox& sb, std::chrono::milliseconds reap_timeout) {
  if (sb.init.pidfd.valid()) {
    // cgroup.kill first: it reaches processes in every namespace; killing
    // the init alone would also end its pid namespace. Its failure matters
    // only if the init then cannot be reaped.
    Status killed = sb.cgroup->Kill();
    Status reaped = KillAndReapInit(sb.init, reap_timeout);
    if (!reaped.ok()) {
      return killed.ok() ? reaped : Status(reaped.code(), reaped.message() + "; cgroup kill: " + killed.ToString());
    }
  }
  Status first = sb.veth.Remove();
  Status detached = sb.net_policy.Detach();
  if (first.ok()) first = detached;
  if (sb.adopted && sb.spec.net == NetMode::kPolicy) {
    // The previous manager's handles went with it: by name. Its veth is a
    // dead owner's now that the init is gone.
    Status unpinned = RemoveBpfPins(sb.id);
    if (first.ok()) first = unpinned;
    Status veths = ReclaimVeths().status();
    if (first.ok()) first = veths;
  }
  Status unloaded = sb.apparmor.Release();
  if (first.ok()) first = unloaded;
  Status removed = sb.cgroup->Remove();
  if (first.ok()) first = removed;
  if (first.ok() && sb.kept) RemoveKept(sb.id);
  return first;
}

std::string AddressText(uint32_t address) {
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &address, text, sizeof(text));
  return text;
}

// Whether a pre-started sandbox can serve `spec`: everything fixed at launch
// (image, mounts, hostname, disk size, network, the seccomp filter its init
// installed) must be the default; limits, environment and TTL are applied
// when it is handed out. Any other spec starts cold, so it gets exactly what
// it asked for.
bool Poolable(const SandboxSpec& spec) {
  const SandboxSpec defaults;
  return spec.image != ImageKind::kDirectory && spec.rw_paths.empty() && spec.hostname == defaults.hostname &&
         spec.disk_bytes == defaults.disk_bytes && spec.net == NetMode::kNone && spec.seccomp == defaults.seccomp;
}

CgroupLimits LimitsOf(const SandboxSpec& spec) {
  CgroupLimits limits;
  limits.memory_bytes = spec.memory_bytes;
  limits.pids = spec.pids;
  limits.cpus = spec.cpus;
  limits.cpuset = spec.cpuset;
  return limits;
}

Manager::Manager(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Manager::~Manager() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->ttl_cv.notify_all();
  impl_->pool_cv.notify_all();
  if (impl_->ttl_thread.joinable()) impl_->ttl_thread.join();
  if (impl_->pool_thread.joinable()) impl_->pool_thread.join();
  for (auto& [kind, ready] : impl_->pool) {
    for (const auto& sb : ready) impl_->TearDownUnpublished(sb);
  }
  for (const auto& id : List()) {
    auto sb = impl_->Find(id);
    if (!sb.ok()) continue;
    if (impl_->keep_sandboxes) {
      impl_->Leave(**sb);
    } else {
      (void)impl_->DestroySandbox(*sb, "manager shutdown");
    }
  }
  // Joins the watcher thread (a crash handler it runs finds nothing left,
  // or hands a sandbox to the reaper).
  impl_->watcher.reset();
  if (impl_->manager_number != 0) CloseKeepingManager(impl_->manager_number);
  // Drains what the reaper still holds (Reaper::Options::drain_timeout).
  impl_->reaper.reset();
}

namespace {

// Each live sandbox holds four descriptors (its init's pidfd and control
// socket, the OOM notifier, its id range's lock): the usual soft limit of
// 1,024 would stop a manager near 250 sandboxes while the hard limit allows
// far more.
Status RaiseDescriptorLimit() {
  rlimit limit {};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return Status::FromErrno(errno, "getrlimit(RLIMIT_NOFILE)");
  if (limit.rlim_cur == limit.rlim_max) return Status::Ok();
  limit.rlim_cur = limit.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) return Status::FromErrno(errno, "setrlimit(RLIMIT_NOFILE, hard)");
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Manager>> Manager::Open(const Options& options) {
  FR_RETURN_IF_ERROR(RaiseDescriptorLimit().Wrap("sandbox manager"));
  auto impl = std::make_unique<Impl>();
  if (::geteuid() != 0) {
    // Said once per process, however many managers it opens.
    static std::once_flag said;
    std::call_once(said, [] {
      log::Warn("sandbox: not running as root; falling back to user namespaces without resource limits "
                "(memory, pids, CPU and cpuset are not applied; no freeze, no --net policy)",
                {{"euid", static_cast<int64_t>(::geteuid())}});
    });
    impl->user_namespace = true;
    impl->cgroups = NewNoCgroupBackend();
  } else {
    FR_ASSIGN_OR_RETURN(impl->cgroups, OpenCgroupBackend());
    UidRangeOptions ranges;
    ranges.base = options.userns_base;
    ranges.width = options.userns_width;
    ranges.slots = options.userns_slots;
    FR_ASSIGN_OR_RETURN(impl->uid_ranges, UidRanges::Open(ranges));
    FR_ASSIGN_OR_RETURN(impl->device_policy, DevicePolicy::Shared());
  }
  impl->allow_unenforced_limits = options.allow_unenforced_limits;
  if (options.keep_sandboxes) {
    if (impl->user_namespace) {
      return Status::FailedPrecondition("keep_sandboxes: kept sandboxes need a manager with root");
    }
    if (options.orphan_timeout.count() <= 0) {
      return Status::InvalidArgument("orphan_timeout: must be positive");
    }
    FR_RETURN_IF_ERROR(EnsureKeptDir());
    impl->keep_sandboxes = true;
    impl->manager_name = OpenKeepingManager(&impl->manager_number);
    impl->orphan_timeout = options.orphan_timeout;
  }
  impl->userns_width = options.userns_width;
  // A pre-started sandbox's init was launched without its TTL: kept ones start cold.
  impl->warm_pool = options.keep_sandboxes ? 0 : std::max(0, options.warm_pool);
  impl->file_timeout = options.file_timeout;
  impl->teardown_timeout = options.teardown_timeout;
  if (options.netns_pool > 0 && !impl->user_namespace) {
    impl->netns_pool = std::make_unique<NetnsPool>(static_cast<size_t>(options.netns_pool));
  }
  Impl* raw = impl.get();
  impl->reaper = std::make_unique<Reaper>(options.reaper,
                                          [raw](const Reaper::Report& report) { raw->OnReaperReport(report); });
  if (options.reclaim_leftovers && !impl->user_namespace) {
    FR_ASSIGN_OR_RETURN(Reclaimed reclaimed, ReclaimLeftovers(*impl->cgroups));
    // A leftover that cannot go yet (a process of it in uninterruptible
    // sleep) does not keep this manager from starting: the reaper retries.
    for (auto& [name, failure] : reclaimed.failed) {
      CgroupBackend* backend = impl->cgroups.get();
      impl->reaper->Submit(
          name, [backend, name = name] { return ReclaimSandbox(*backend, name); }, failure);
    }
    // The records of kept sandboxes that ended on their own (reclaimed
    // above: their inits are gone).
    for (const std::string& id : ListKeptRecords()) {
      if (!KeptAlive(id)) RemoveKept(id);
    }
  }
  // The watcher goes on at once to the other sandboxes; the reaper tears
  // this one down.
  if (options.watch_crashes) {
    FR_ASSIGN_OR_RETURN(impl->watcher, CrashWatcher::Start(&impl->events, [raw](const std::string& id) {
                          auto sb = raw->Find(id);
                          if (sb.ok()) raw->DestroyInBackground(*sb, "init exited");
                        }));
  }
  if (impl->warm_pool > 0) impl->pool_thread = std::thread([raw] { raw->PoolLoop(); });
  return std::unique_ptr<Manager>(new Manager(std::move(impl)));
}

const char* Manager::cgroup_layout() const { return impl_->cgroups->layout(); }

Reaper::Stats Manager::teardown_stats() const { return impl_->reaper->stats(); }

Result<std::string> Manager::Create(const SandboxSpec& spec, const std::string& client_key) {
  if (!client_key.empty()) {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = impl_->by_client_key.find(client_key);
    if (it != impl_->by_client_key.end()) return it->second;
  }
  FR_RETURN_IF_ERROR(ValidateSpec(spec));
  if (impl_->user_namespace && !impl_->allow_unenforced_limits) {
    const std::pair<const char*, bool> limits[] = {{"memory", spec.memory_bytes > 0},
                                                   {"pids", spec.pids > 0},
                                                   {"cpus", spec.cpus > 0},
                                                   {"cpuset", !spec.cpuset.empty()}};
    for (const auto& [field, set] : limits) {
      if (!set) continue;
      return Status::FailedPrecondition(std::string(field) +
                                        ": this manager runs without root and has no cgroups to enforce it; drop the "
                                        "limit, or allow unenforced limits (--allow-unenforced-limits)");
    }
  }
  std::shared_ptr<Sandbox> sb = impl_->TakeFromPool(spec);
  if (sb != nullptr) {
    if (Status applied = sb->cgroup->ApplyLimits(LimitsOf(spec)); !applied.ok()) {
      impl_->TearDownUnpublished(sb);
      return applied.Wrap("create");
    }
    sb->spec = spec;
  } else {
    FR_ASSIGN_OR_RETURN(sb, impl_->Launch(spec));
  }
  sb->client_key = client_key;
  sb->created = SystemClock::now();
  if (spec.ttl.count() > 0) sb->expires = sb->created + spec.ttl;
  std::string winner;  // a concurrent Create with the same key won
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = client_key.empty() ? impl_->by_client_key.end() : impl_->by_client_key.find(client_key);
    if (it != impl_->by_client_key.end()) {
      winner = it->second;
    } else {
      if (!client_key.empty()) impl_->by_client_key[client_key] = sb->id;
      impl_->sandboxes[sb->id] = sb;
      if (spec.ttl.count() > 0 && !impl_->ttl_thread.joinable() && !impl_->stopping) {
        Impl* raw = impl_.get();
        impl_->ttl_thread = std::thread([raw] { raw->TtlLoop(); });
      }
    }
  }
  if (!winner.empty()) {
    impl_->TearDownUnpublished(sb);  // not under impl_->mu: it may take a while
    return winner;
  }
  if (spec.ttl.count() > 0) impl_->ttl_cv.notify_all();
  impl_->events.Emit(sb->id, EventKind::kCreated, "");
  // Watched once published (a crash handler finds it) and after its created
  // event; under sb->mu, so a concurrent Destroy's Unwatch orders with it.
  Status watched;
  {
    std::lock_guard<std::mutex> lock(sb->mu);
    if (sb->state != State::kDestroyed && impl_->watcher != nullptr) {
      watched = impl_->watcher->Watch(sb->id, sb->init.pidfd.get(), sb->init.control.get(), sb->init.pid,
                                      sb->cgroup.get());
    }
  }
  if (!watched.ok()) {
    (void)impl_->DestroySandbox(sb, "crash watch failed");
    return watched.Wrap("create");
  }
  if (sb->kept) {
    Status recorded;
    {
      std::lock_guard<std::mutex> lock(sb->mu);
      recorded = WriteKeptRecord(RecordOf(*sb, impl_->manager_name));
    }
    if (!recorded.ok()) {
      (void)impl_->DestroySandbox(sb, "kept record failed");
      return recorded.Wrap("create");
    }
  }
  log::Debug("sandbox created", {{"id", sb->id}, {"init_pid", sb->init.pid}});
  return sb->id;
}

Result<ExecResult> Manager::Exec(const std::string& id, const ExecRequest& given) {
  FR_RETURN_IF_ERROR(CheckExecUser("user", given.user));
  FR_RETURN_IF_ERROR(CheckExecUser("group", given.group));
  FR_ASSIGN_OR_RETURN(std::shared_ptr<Sandbox> sb, impl_->Find(id));
  ExecRequest request = given;
  if (request.user.empty() && request.group.empty()) {
    request.user = sb->spec.user;
    request.group = sb->spec.group;
  }
  if (request.cwd.empty()) request.cwd = sb->spec.workdir;
  std::lock_guard<std::mutex> exec_lock(sb->exec_mu);
  uint64_t oom_before = 0;
  uint32_t exec_id = 0;
  {
    std::lock_guard<std::mutex> lock(sb->mu);
    FR_RETURN_IF_ERROR(CheckVerb(sb->state, Verb::kExec, id));
    FR_ASSIGN_OR_RETURN(oom_before, sb->cgroup->OomKillCount());
    exec_id = sb->next_exec_id++;
  }
  FR_ASSIGN_OR_RETURN(ExecResult result,
                      RunInInit(sb->init.control.get(), exec_id, request, sb->spec.env, &sb->running_exec));
  std::lock_guard<std::mutex> lock(sb->mu);
  if (sb->state == State::kDestroyed) return Status::Unavailable("sandbox " + id + " was destroyed during exec");
  FR_ASSIGN_OR_RETURN(uint64_t oom_after, sb->cgroup->OomKillCount());
  result.oom_killed = oom_after > oom_before;
  if (result.timed_out) {
    impl_->events.Emit(id, EventKind::kTimeout,
                       "exec " + (request.argv.empty() ? std::string() : request.argv[0]) + " timed out after " +
                           std::to_string(request.timeout.count()) + " ms");
  }
  return result;
}

Status Manager::Signal(const std::string& id, int signal) {
  if (signal < 1 || signal > kMaxSignal) {
    return Status::InvalidArgument("signal " + std::to_string(signal) + ": not a signal number (1.." +
                                   std::to_string(kMaxSignal) + ")");
  }
  FR_ASSIGN_OR_RETURN(std::shared_ptr<Sandbox> sb, impl_->Find(id));
  {
    // Only the state check holds mu (briefly); the exec holds exec_mu, not mu.
    std::lock_guard<std::mutex> lock(sb->mu);
    if (sb->state == State::kDestroyed) return Status::NotFound("sandbox " + id + " was destroyed");
    if (sb->state == State::kFrozen) {
      return Status::FailedPrecondition("sandbox " + id + " is frozen: signal not allowed");
    }
  }
  const uint32_t exec_id = sb->running_exec.load();
  if (exec_id == 0) return Status::FailedPrecondition("sandbox " + id + ": no exec is running to signal");
  // The exec may end meanwhile; the init then ignores the stale id.
  return SignalExec(sb->init.control.get(), exec_id, signal).Wrap("sandbox " + id);
}

Status Manager::PutFile(const std::string& id, const std::string& path, std::string_view data, mode_t mode) {
  FR_ASSIGN_OR_RETURN(FileTarget target, impl_->FileTargetOf(id));
  return WriteFileAsSandbox(target, path, data, mode, impl_->file_timeout).Wrap("sandbox " + id);
}

Result<std::string> Manager::GetFile(const std::string& id, const std::string& path, size_t max_bytes) {
  FR_ASSIGN_OR_RETURN(FileTarget target, impl_->FileTargetOf(id));
  auto data = ReadFileAsSandbox(target, path, max_bytes, impl_->file_timeout);
  if (!data.ok()) return data.status().Wrap("sandbox " + id);
  return data;
}

Status Manager::Freeze(const std::string& id) {
  FR_ASSIGN_OR_RETURN(std::shared_ptr<Sandbox> sb, impl_->Find(id));
  std::lock_guard<std::mutex> lock(sb->mu);
  FR_RETURN_IF_ERROR(CheckVerb(sb->state, Verb::kFreeze, id));
  FR_RETURN_IF_ERROR(sb->cgroup->SetFrozen(true).Wrap("freeze " + id));
  sb->state = State::kFrozen;
  return Status::Ok();
}

Status Manager::Thaw(const std::string& id) {
  FR_ASSIGN_OR_RETURN(std::shared_ptr<Sandbox> sb, impl_->Find(id));
  std::lock_guard<std::mutex> lock(sb->mu);
  FR_RETURN_IF_ERROR(CheckVerb(sb->state, Verb::kThaw, id));
  FR_RETURN_IF_ERROR(sb->cgroup->SetFrozen(false).Wrap("thaw " + id));
  sb->state = State::kRunning;
  return Status::Ok();
}

Result<TreeSnapshot> Manager::SnapshotFrozen(const std::string& id, const std::string& path,
                                             const SnapshotLimits& limits) {
  FR_ASSIGN_OR_RETURN(std::shared_ptr<Sandbox> sb, impl_->Find(id));
  // Held through the walk: nothing thaws the sandbox while it is copied.
  std::lock_guard<std::mutex> lock(sb->mu);
  if (sb->state != State::kFrozen) return Status::FailedPrecondition("sandbox " + id + ": snapshot of a sandbox that is not frozen");
  FR_ASSIGN_OR_RETURN(FileTarget target, OpenFileTarget(sb->init.pid, sb->init.pidfd.get(),
                                                        impl_->user_namespace ? UsernsMode::kRootless : UsernsMode::kMapped));
  auto snapshot = SnapshotTree(target.root.get(), path, limits);
  if (!snapshot.ok()) return snapshot.status().Wrap("sandbox " + id);
  return snapshot;
}

Status Manager::RestoreSnapshot(const std::string& id, const std::string& path, const TreeSnapshot& snapshot) {
  FR_ASSIGN_OR_RETURN(std::shared_ptr<Sandbox> sb, impl_->Find(id));
  std::lock_guard<std::mutex> lock(sb->mu);
  FR_RETURN_IF_ERROR(CheckVerb(sb->state, Verb::kFiles, id));
  FR_ASSIGN_OR_RETURN(FileTarget target, OpenFileTarget(sb->init.pid, sb->init.pidfd.get(),
                                                        impl_->user_namespace ? UsernsMode::kRootless : UsernsMode::kMapped));
  const uid_t uid = impl_->user_namespace ? ::geteuid() : sb->range.base;
  const gid_t gid = impl_->user_namespace ? ::getegid() : sb->range.base;
  const uint32_t width = impl_->user_namespace ? 1 : sb->range.count;
  return RestoreTree(target.root.get(), path, snapshot, uid, gid, width).Wrap("sandbox " + id);
}

Status Manager::Destroy(const std::string& id) {
  FR_ASSIGN_OR_RETURN(std::shared_ptr<Sandbox> sb, impl_->Find(id));
  return impl_->DestroySandbox(sb);
}

Result<SandboxInfo> Manager::Info(const std::string& id) {
  FR_ASSIGN_OR_RETURN(std::shared_ptr<Sandbox> sb, impl_->Find(id));
  std::lock_guard<std::mutex> lock(sb->mu);
  if (sb->state == State::kDestroyed) return Status::NotFound("sandbox " + id + " was destroyed");
  SandboxInfo info;
  info.id = sb->id;
  info.state = sb->state;
  info.init_pid = sb->init.pid;
  info.host_uid = impl_->user_namespace ? ::geteuid() : sb->range.base;
  info.created = sb->created;
  info.expires = sb->expires;
  info.disk_device = sb->disk_device;
  info.host_address = sb->host_address;
  FR_ASSIGN_OR_RETURN(info.oom_kills, sb->cgroup->OomKillCount());
  return info;
}

Result<EventPage> Manager::EventsSince(const std::string& id, uint64_t cursor) {
  return impl_->events.EventsSince(id, cursor);
}

Result<EventPage> Manager::WaitEvents(const std::string& id, uint64_t cursor, std::chrono::milliseconds timeout) {
  return impl_->events.WaitEventsSince(id, cursor, timeout);
}

std::vector<std::string> Manager::List() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<std::string> ids;
  for (const auto& entry : impl_->sandboxes) ids.push_back(entry.first);
  return ids;
}

}  // namespace flashroll::sandbox
