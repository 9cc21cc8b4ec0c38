// Internal to sandbox/ (not a contract): a live sandbox and the Manager's
// state, shared by sandbox.cc (the lifecycle) and manager_kept.cc (kept
// sandboxes: records, adoption).
#pragma once

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
#include "sandbox/sandbox.h"

namespace flashroll::sandbox {

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
  IdRange range;  // its host ids (root manager)
  std::string host_address;  // --net policy: the veth's host side, as SandboxInfo says it
  // Kept (kept.h): it has a record. Adopted: it was taken over from a
  // manager before this one, whose handles on its veth and policy links
  // went with it (teardown removes those by name).
  bool kept = false;
  bool adopted = false;
  uint32_t generation = 0;  // KeptRecord::generation
  std::string annotation;   // guarded by mu

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

// Removes what is left of a sandbox (sandbox.cc).
Status TearDown(Sandbox& sb, std::chrono::milliseconds reap_timeout);

// Whether a pre-started sandbox can serve `spec` (sandbox.cc).
bool Poolable(const SandboxSpec& spec);
CgroupLimits LimitsOf(const SandboxSpec& spec);
// An IPv4 address (network byte order) as text.
std::string AddressText(uint32_t address);

// manager_kept.cc: a kept sandbox's record as it stands, held by manager
// `manager`; whether the manager a record names is open; this process's
// keeping managers, by number.
KeptRecord RecordOf(const Sandbox& sb, const std::string& manager);
bool ManagerOpen(const std::string& manager);
std::string OpenKeepingManager(uint64_t* number);
void CloseKeepingManager(uint64_t number);

struct Manager::Impl {
  std::unique_ptr<CgroupBackend> cgroups;
  AppArmorProfiles apparmor_profiles;  // shared by sandboxes of the same profile
  int warm_pool = 0;            // constant after Open
  std::unique_ptr<NetnsPool> netns_pool;  // null without root or when off; set in Open
  bool user_namespace = false;  // no root: user namespaces, no cgroups; constant after Open
  std::unique_ptr<UidRanges> uid_ranges;  // root: each sandbox's ids; set in Open
  const DevicePolicy* device_policy = nullptr;  // root; process-lifetime; set in Open
  bool allow_unenforced_limits = false;
  bool keep_sandboxes = false;                  // constant after Open
  std::string manager_name;                     // this manager in kept records; constant after Open
  uint64_t manager_number = 0;                  // this process's keeping manager number; constant after Open
  std::chrono::milliseconds orphan_timeout{0};  // constant after Open
  uint32_t userns_width = 0;                    // constant after Open
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
      sb->range = sb->ids.range();
      FR_ASSIGN_OR_RETURN(userns, UserNamespace::Create(sb->ids.range()));
      UseUserNamespace(userns, &plan);
    }
    // Kept: the init holds where the next manager connects, and the range.
    UniqueFd listen;
    if (keep_sandboxes) {
      FR_ASSIGN_OR_RETURN(listen, ListenForNextManager(sb->id));
      plan.keep.listen_fd = listen.get();
      plan.keep.range_lock_fd = sb->ids.lock_fd();
      plan.keep.orphan_ms = orphan_timeout.count();
      if (spec.ttl.count() > 0) {
        plan.keep.expires_ms =
            std::chrono::duration_cast<std::chrono::milliseconds>((SystemClock::now() + spec.ttl).time_since_epoch())
                .count();
      }
      sb->kept = true;
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
    sb->host_address = AddressText(sb->veth.host_address());
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

  // Leaves a kept sandbox running for the next manager: no longer watched,
  // and every handle on it let go without removing what it holds. Its init
  // sees its control socket close and waits for the next manager.
  void Leave(Sandbox& sb) {
    std::lock_guard<std::mutex> lock(sb.mu);
    if (sb.state == State::kDestroyed) return;
    if (watcher != nullptr) watcher->Unwatch(sb.id);
    sb.state = State::kDestroyed;
    sb.cgroup->Abandon();
    sb.net_policy.Abandon();
    sb.veth.Abandon();
    sb.apparmor.Abandon();
    sb.init.control.reset();
    sb.init.pidfd.reset();  // the range's lock stays with the init's copy
    log::Info("sandbox left running for the next manager", {{"id", sb.id}});
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

}  // namespace flashroll::sandbox
