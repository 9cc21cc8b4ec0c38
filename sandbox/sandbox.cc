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
#include "sandbox/launcher.h"
#include "sandbox/naming.h"
#include "sandbox/netns_pool.h"
#include "sandbox/net_policy.h"
#include "sandbox/reaper.h"
#include "sandbox/reclaim.h"
#include "sandbox/uid_ranges.h"
#include "sandbox/userns.h"
#include "sandbox/veth.h"

namespace flashroll::sandbox {

namespace {

using SystemClock = std::chrono::system_clock;

// One live sandbox. `mu` guards state; `exec_mu` serialises execs. Whoever
// moves the state to kDestroyed (under `mu`) owns the teardown: it, or the
// reaper it hands the sandbox to, alone touches the init, veth, policy and
// cgroup from then on, without `mu` (a slow teardown must not block Info or
// a caller's check of the state). The descriptors stay open until the last
// reference goes, so a concurrent exec or signal never sees a reused fd.
struct Sandbox {
  // First, so it goes last: the range is free again only once nothing of
  // the sandbox is left.
  UidRangeLease ids;
  std::string id;
  SandboxSpec spec;
  std::string client_key;
  SystemClock::time_point created;
  SystemClock::time_point expires;  // epoch: no TTL

  std::mutex mu;
  State state = State::kRunning;
  std::unique_ptr<Cgroup> cgroup;
  // --net policy; declared after the cgroup so they go first on failure.
  NetPolicyAttachment net_policy;
  Veth veth;
  AppArmorProfiles::Lease apparmor;  // only where the kernel has AppArmor
  InitProcess init;
  // "/dev/loopN" its writable layer is on; empty without one.
  std::string disk_device;

  std::mutex exec_mu;
  uint32_t next_exec_id = 1;  // guarded by mu
  // The id of the exec whose command is running, 0 when none: Signal reads
  // it without waiting for exec_mu (see RunInInit).
  std::atomic<uint32_t> running_exec{0};

  // An init never reaped (a teardown the reaper abandoned) may leave
  // processes in the range: it must not go to another sandbox.
  ~Sandbox() {
    if (init.pidfd.valid()) ids.KeepForever();
  }
};

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
  Status unloaded = sb.apparmor.Release();
  if (first.ok()) first = unloaded;
  Status removed = sb.cgroup->Remove();
  if (first.ok()) first = removed;
  return first;
}

}  // namespace

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

struct Manager::Impl {
  std::unique_ptr<CgroupBackend> cgroups;
  AppArmorProfiles apparmor_profiles;  // shared by sandboxes of the same profile
  int warm_pool = 0;            // constant after Open
  std::unique_ptr<NetnsPool> netns_pool;  // null without root or when off; set in Open
  bool user_namespace = false;  // no root: user namespaces, no cgroups; constant after Open
  std::unique_ptr<UidRanges> uid_ranges;  // root: each sandbox's ids; set in Open
  const DevicePolicy* device_policy = nullptr;  // root; process-lifetime; set in Open
  bool allow_unenforced_limits = false;
  std::chrono::milliseconds file_timeout{0};  // constant after Open
  std::chrono::milliseconds teardown_timeout{0};  // constant after Open
  EventLog events;
  std::unique_ptr<CrashWatcher> watcher;  // set in Open; null when Options::watch_crashes is off
  // Teardowns that failed, or that the TTL thread and the crash watcher
  // hand off rather than run themselves; reset in ~Manager before `events`.
  std::unique_ptr<Reaper> reaper;  // set in Open

  std::mutex mu;
  std::condition_variable ttl_cv;
  std::map<std::string, std::shared_ptr<Sandbox>> sandboxes;  // guarded by mu
  std::map<std::string, std::string> by_client_key;           // guarded by mu
  std::set<std::string> expiring;  // handed to the reaper by the TTL thread; guarded by mu
  bool stopping = false;                                       // guarded by mu
  std::thread ttl_thread;  // started under mu by the first Create with a TTL
  // Pre-started sandboxes per image, not yet handed out (see Options::warm_pool).
  std::map<ImageKind, std::deque<std::shared_ptr<Sandbox>>> pool;  // guarded by mu
  std::condition_variable pool_cv;
  std::thread pool_thread;

  // The cold path: plan, cgroups, init. Nothing is left behind on failure.
  // `for_pool`: its limits come when it is handed out, so its cgroups
  // have every hierarchy.
  Result<std::shared_ptr<Sandbox>> Launch(const SandboxSpec& spec, bool for_pool = false) {
    FR_ASSIGN_OR_RETURN(ContainPlan plan,
                        PrepareContainParentSide(spec, user_namespace ? UsernsMode::kRootless : UsernsMode::kMapped));
    auto sb = std::make_shared<Sandbox>();
    sb->id = NewSandboxName();
    sb->spec = spec;
    // An OCI image's User and WorkingDir, where the spec names none.
    ApplyImageDefaults(plan.mount.image_defaults, &sb->spec);
    FR_RETURN_IF_ERROR(LoadAppArmor(*sb, &plan));
    // Held by the init once it has joined; ours closes when Launch returns.
    UserNamespace userns;
    // The writable root's filesystem is made on a thread of its own while
    // this one makes the user namespace and the cgroups: the three are
    // independent until the clone, and each mostly waits (the ext4 mount
    // reads its superblock through direct I/O, a v1 memory cgroup's
    // creation waits on the kernel), so a start pays for the longest, not
    // the sum (docs/BENCHMARKS.md). Held until the child has attached it
    // (or failed); then the filesystem lives as long as the sandbox's
    // mount namespace does. Joined before any return (future's destructor).
    std::future<Result<SandboxDisk>> disk_made;
    if (uid_ranges != nullptr) {
      disk_made = std::async(std::launch::async, SandboxDisk::Create, spec.disk_bytes);
      FR_ASSIGN_OR_RETURN(sb->ids, uid_ranges->Acquire(sb->id));
      FR_ASSIGN_OR_RETURN(userns, UserNamespace::Create(sb->ids.range()));
      UseUserNamespace(userns, &plan);
    }
    // On any failure below, the Cgroup's destructor kills and removes it.
    CgroupLimits limits = LimitsOf(spec);
    limits.every_hierarchy = for_pool;
    FR_ASSIGN_OR_RETURN(sb->cgroup, cgroups->Create(sb->id, limits));
    SandboxDisk disk;
    if (disk_made.valid()) {
      FR_ASSIGN_OR_RETURN(disk, disk_made.get());
      plan.mount.disk_mount_fd = disk.mount_fd();
      sb->disk_device = disk.device();
    }
    // Before the first process enters the cgroup, like the network policy.
    if (device_policy != nullptr) FR_RETURN_IF_ERROR(device_policy->Attach(sb->cgroup->clone_into_fd(), sb->id));
    if (spec.net != NetMode::kPolicy) {
      // The child's copy of the descriptor is what it joins; ours closes
      // when Launch returns.
      UniqueFd netns = netns_pool != nullptr ? netns_pool->Take() : UniqueFd();
      plan.netns_fd = netns.get();
      FR_ASSIGN_OR_RETURN(sb->init, LaunchInit(plan, *sb->cgroup));
      return sb;
    }
    // The policy goes on before the first process enters the cgroup, so
    // nothing of the sandbox ever runs unpoliced.
    FR_ASSIGN_OR_RETURN(NetPolicyManager * bpf, NetPolicyManager::Shared());
    NetPolicy policy;
    policy.allow = spec.allow;
    policy.allow_loopback = true;  // the sandbox's own loopback: it has its own network namespace
    // Pinned, so the policy outlives this manager if it is killed (bpf_pins.h).
    FR_RETURN_IF_ERROR(EnsureBpfPinRoot());
    FR_ASSIGN_OR_RETURN(sb->net_policy, bpf->Attach("/proc/self/fd/" + std::to_string(sb->cgroup->clone_into_fd()),
                                                    policy, BpfPinDir(sb->id)));
    FR_ASSIGN_OR_RETURN(sb->veth, Veth::Create(sb->id));
    plan.veth = sb->veth.child_plan();
    Sandbox* raw = sb.get();
    auto move_veth = [raw](pid_t pid) { return raw->veth.MoveIntoNetns(pid); };
    FR_ASSIGN_OR_RETURN(sb->init, LaunchInit(plan, *sb->cgroup, move_veth));
    return sb;
  }

  // Where the kernel has AppArmor, loads the sandbox's profile and has the
  // init start in it.
  Status LoadAppArmor(Sandbox& sb, ContainPlan* plan) {
    if (!AppArmorEnabled()) {
      static std::once_flag said;
      std::call_once(said, [] {
        log::Debug("sandbox: the kernel has no AppArmor (/sys/kernel/security/apparmor); no per-sandbox profile", {});
      });
      return Status::Ok();
    }
    const std::vector<std::string>& entries = plan->mount.writable_root_entries;
    FR_ASSIGN_OR_RETURN(sb.apparmor, apparmor_profiles.Acquire([&](const std::string& name) {
                          return GenerateAppArmorProfile(name, sb.spec, entries);
                        }));
    plan->apparmor_exec = "exec " + sb.apparmor.name();
    return Status::Ok();
  }

  // A pre-started sandbox for `spec`, or nullptr when none is ready.
  std::shared_ptr<Sandbox> TakeFromPool(const SandboxSpec& spec) {
    if (warm_pool == 0 || !Poolable(spec)) return nullptr;
    std::lock_guard<std::mutex> lock(mu);
    auto& ready = pool[spec.image];
    if (ready.empty()) return nullptr;
    std::shared_ptr<Sandbox> sb = std::move(ready.front());
    ready.pop_front();
    pool_cv.notify_all();
    return sb;
  }

  // Keeps `warm_pool` sandboxes of each built-in image started.
  void PoolLoop() {
    std::unique_lock<std::mutex> lock(mu);
    while (!stopping) {
      bool launched = false;
      for (ImageKind kind : {ImageKind::kHost, ImageKind::kBusybox}) {
        if (stopping || pool[kind].size() >= static_cast<size_t>(warm_pool)) continue;
        lock.unlock();
        SandboxSpec spec;
        spec.image = kind;
        auto sb = Launch(spec, /*for_pool=*/true);
        lock.lock();
        if (!sb.ok()) {
          log::Warn("sandbox pool launch failed", {{"error", sb.status().ToString()}});
          continue;
        }
        pool[kind].push_back(std::move(*sb));
        launched = true;
      }
      if (!launched) pool_cv.wait_for(lock, std::chrono::seconds(1));
    }
  }

  Result<std::shared_ptr<Sandbox>> Find(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = sandboxes.find(id);
    if (it == sandboxes.end()) return Status::NotFound("sandbox " + id + ": no such sandbox");
    return it->second;
  }

  // What a file operation needs, taken under the sandbox's lock (which
  // keeps the init from being reaped); the I/O then runs without it, so an
  // exec, Destroy, TTL expiry or the crash handler never waits for a file.
  Result<FileTarget> FileTargetOf(const std::string& id) {
    FR_ASSIGN_OR_RETURN(std::shared_ptr<Sandbox> sb, Find(id));
    std::lock_guard<std::mutex> lock(sb->mu);
    FR_RETURN_IF_ERROR(CheckVerb(sb->state, Verb::kFiles, id));
    return OpenFileTarget(sb->init.pid, sb->init.pidfd.get(),
                          user_namespace ? UsernsMode::kRootless : UsernsMode::kMapped);
  }

  // Takes the sandbox out of service: kDestroyed, no longer watched. Returns
  // false when it already was (someone else owns its teardown).
  bool Retire(Sandbox& sb) {
    std::lock_guard<std::mutex> lock(sb.mu);
    if (sb.state == State::kDestroyed) return false;
    sb.state = State::kDestroyed;
    // Before the kill, so that the init's death is not taken for a crash.
    if (watcher != nullptr) watcher->Unwatch(sb.id);
    return true;
  }

  // Removes a retired sandbox from the tables (List, Info, client keys).
  void Unpublish(const Sandbox& sb) {
    std::lock_guard<std::mutex> lock(mu);
    sandboxes.erase(sb.id);
    expiring.erase(sb.id);
    if (!sb.client_key.empty()) {
      auto it = by_client_key.find(sb.client_key);
      if (it != by_client_key.end() && it->second == sb.id) by_client_key.erase(it);
    }
  }

  // Nothing of the sandbox is left: its last events.
  void Finished(const Sandbox& sb, const std::string& why) {
    events.Emit(sb.id, EventKind::kDestroyed, why);
    events.Close(sb.id);
  }

  // A teardown for the reaper: it retries `TearDown` until nothing is left,
  // then emits the destroyed event. With `retire`, its first attempt first
  // takes the sandbox out of service (nothing to do if someone else did).
  Reaper::Teardown TeardownJob(std::shared_ptr<Sandbox> sb, std::string why, bool retire) {
    return [this, sb = std::move(sb), why = std::move(why), retire]() mutable -> Status {
      if (retire) {
        retire = false;
        if (!Retire(*sb)) return Status::Ok();
        Status status = TearDown(*sb, teardown_timeout);
        Unpublish(*sb);
        if (status.ok()) Finished(*sb, why);
        return status;
      }
      Status status = TearDown(*sb, teardown_timeout);
      if (status.ok()) Finished(*sb, why);
      return status;
    };
  }

  // Tears down a sandbox that was never published (a pooled one, a lost
  // client-key race): here, and on failure through the reaper.
  void TearDownUnpublished(const std::shared_ptr<Sandbox>& sb) {
    Status status = TearDown(*sb, teardown_timeout);
    if (!status.ok()) {
      reaper->Submit(
          sb->id, [this, sb] { return TearDown(*sb, teardown_timeout); }, status);
    }
  }

  // Destroy on the caller's thread: the first attempt runs here, so that on
  // success nothing of the sandbox is left once it is gone from List() and
  // Info(). A failed attempt leaves it out of service and hands it to the
  // reaper, and the error is returned.
  Status DestroySandbox(const std::shared_ptr<Sandbox>& sb, const char* why = "destroy") {
    if (!Retire(*sb)) return Status::NotFound("sandbox " + sb->id + " was destroyed");
    Status status = TearDown(*sb, teardown_timeout);
    Unpublish(*sb);
    if (status.ok()) {
      Finished(*sb, why);
      return status;
    }
    reaper->Submit(sb->id, TeardownJob(sb, why, /*retire=*/false), status);
    return status.Wrap("destroy " + sb->id + " (out of service; its teardown is retried in the background)");
  }

  // Destroy without waiting: for the TTL thread and the crash watcher,
  // which must go on to the other sandboxes whatever this one's teardown
  // does.
  void DestroyInBackground(std::shared_ptr<Sandbox> sb, const char* why) {
    const std::string id = sb->id;
    reaper->Submit(id, TeardownJob(std::move(sb), why, /*retire=*/true));
  }

  // What the reaper reports: a log line for every failed attempt and an
  // event on the sandbox's log (when it has one: published sandboxes do).
  void OnReaperReport(const Reaper::Report& report) {
    const bool has_log = events.EventsSince(report.id, UINT64_MAX).ok();
    switch (report.outcome) {
      case Reaper::Outcome::kRetrying:
        log::Warn("sandbox teardown failed; retrying",
                  {{"id", report.id},
                   {"attempt", static_cast<int64_t>(report.attempt)},
                   {"retry_ms", static_cast<int64_t>(report.next_retry.count())},
                   {"error", report.status.ToString()}});
        if (has_log) {
          events.Emit(report.id, EventKind::kTeardownFailed,
                      "attempt " + std::to_string(report.attempt) + ": " + report.status.ToString() +
                          "; retrying in " + std::to_string(report.next_retry.count()) + " ms");
        }
        break;
      case Reaper::Outcome::kFinished:
        if (report.attempt > 1) {
          log::Info("sandbox teardown finished", {{"id", report.id}, {"attempts", static_cast<int64_t>(report.attempt)}});
        }
        break;
      case Reaper::Outcome::kAbandoned:
        log::Error("sandbox teardown abandoned at manager shutdown; the next manager's start-up reclaims it",
                   {{"id", report.id},
                    {"attempts", static_cast<int64_t>(report.attempt)},
                    {"error", report.status.ToString()}});
        if (has_log) {
          events.Emit(report.id, EventKind::kDestroyed,
                      "teardown abandoned after " + std::to_string(report.attempt) +
                          " attempts: " + report.status.ToString());
          events.Close(report.id);
        }
        break;
    }
  }

  void TtlLoop() {
    std::unique_lock<std::mutex> lock(mu);
    while (!stopping) {
      auto next = SystemClock::time_point::max();
      std::vector<std::shared_ptr<Sandbox>> expired;
      const auto now = SystemClock::now();
      for (const auto& [id, sb] : sandboxes) {
        if (sb->expires == SystemClock::time_point() || expiring.count(id) != 0) continue;
        if (sb->expires <= now) expired.push_back(sb);
        else next = std::min(next, sb->expires);
      }
      if (!expired.empty()) {
        for (const auto& sb : expired) expiring.insert(sb->id);
        lock.unlock();
        // Handed to the reaper, never torn down here: one sandbox whose
        // teardown hangs must not delay the others' expiry.
        for (const auto& sb : expired) {
          log::Info("sandbox ttl expired", {{"id", sb->id}});
          events.Emit(sb->id, EventKind::kTimeout, "ttl expired");
          DestroyInBackground(sb, "ttl");
        }
        lock.lock();
        continue;
      }
      if (next == SystemClock::time_point::max()) ttl_cv.wait(lock);
      else ttl_cv.wait_until(lock, next);
    }
  }
};

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
    if (sb.ok()) (void)impl_->DestroySandbox(*sb, "manager shutdown");
  }
  // Joins the watcher thread (a crash handler it runs finds nothing left,
  // or hands a sandbox to the reaper).
  impl_->watcher.reset();
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
  impl->warm_pool = std::max(0, options.warm_pool);
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
  const uid_t uid = impl_->user_namespace ? ::geteuid() : sb->ids.range().base;
  const gid_t gid = impl_->user_namespace ? ::getegid() : sb->ids.range().base;
  const uint32_t width = impl_->user_namespace ? 1 : sb->ids.range().count;
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
  info.host_uid = impl_->user_namespace ? ::geteuid() : sb->ids.range().base;
  info.created = sb->created;
  info.expires = sb->expires;
  info.disk_device = sb->disk_device;
  if (sb->spec.net == NetMode::kPolicy) {
    char text[INET_ADDRSTRLEN] = {};
    const uint32_t address = sb->veth.host_address();
    ::inet_ntop(AF_INET, &address, text, sizeof(text));
    info.host_address = text;
  }
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
