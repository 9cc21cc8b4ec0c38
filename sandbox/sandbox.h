// The sandbox lifecycle API: create, exec, signal, put/get files, freeze,
// thaw, destroy. Front ends (the CLI, the node agent) only parse and call this.
//
// A sandbox is a contained init process (launcher.h) in its own cgroups
// (cgroup.h) and its own user namespace (userns.h): with a root manager,
// uid and gid 0 inside are a host range of its own (uid_ranges.h), and it
// may open no device but those its /dev provides (device_policy.h). Exec
// asks that init to start a command, so every command
// inherits the full isolation stack. Destroy works from any state: it kills
// the cgroup, reaps the init (the kernel then tears down the namespaces and
// every mount with it) and removes the cgroup directories; a teardown that
// fails or runs out of time leaves the sandbox out of service and goes to a
// reaper that retries it and reports each attempt (reaper.h). A sandbox
// with a TTL is destroyed when it expires. Open() first reclaims the cgroups (and
// veths, pinned BPF links, AppArmor profiles) of sandboxes whose manager was
// killed (see naming.h, reclaim.h); one that cannot go yet goes to the reaper.
// With Options::keep_sandboxes (sandboxd's choice) sandboxes outlive the
// manager instead, and the next one adopts them (kept.h).
// Crashes (OOM kill, PID 1 exit, root filesystem damage) are reported as
// repercussion events (events.h, crash_watcher.h); a sandbox whose PID 1
// died is destroyed.
//
// Thread safety: all Manager methods may be called concurrently. Calls on
// different sandboxes run in parallel; execs in one sandbox run one at a
// time; Signal and Destroy do not wait for a running exec (a destroyed
// sandbox's exec returns kUnavailable). File reads and writes hold no lock
// while they run (file_access.h): nothing waits for them.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "sandbox/events.h"
#include "sandbox/reaper.h"
#include "sandbox/spec.h"
#include "sandbox/state.h"
#include "sandbox/tree_snapshot.h"

namespace flashroll::sandbox {

struct ExecRequest {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH when it has no '/'
  std::vector<std::string> env;   // empty: the sandbox's SandboxSpec::env
  // Empty: the sandbox's SandboxSpec::workdir, else "/".
  std::string cwd;
  // Who runs it: a name in the sandbox's /etc/passwd (its primary group and
  // the /etc/group entries listing it come along) or a uid; `group` a name
  // in /etc/group or a gid, overriding the primary group. Empty: the
  // sandbox's default (SandboxSpec::user, ::group, which an OCI image's
  // config User fills where the spec names none), else root. Root holds
  // the sandbox's bounded capabilities (caps.h), any other user none.
  std::string user;
  std::string group;
  std::chrono::milliseconds timeout{0};  // 0: none
  // Pass-through: when all three are >= 0 the command uses these descriptors
  // and nothing is buffered. Otherwise stdin is /dev/null and stdout/stderr
  // are collected into the result.
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  // When >= 0 and readable (e.g. a signalfd for SIGINT), the command is
  // killed and the result is marked cancelled.
  int cancel_fd = -1;
  size_t max_output_bytes = size_t{16} << 20;  // per stream; the rest is dropped
};

struct ExecResult {
  int exit_code = 0;   // the exit status, or 128 + signal number
  int signal = 0;      // the signal that ended the command; 0 if it exited
  bool timed_out = false;
  bool cancelled = false;
  bool oom_killed = false;  // the kernel OOM-killed a process of the sandbox during the exec
  int start_errno = 0;      // the command could not be started (exit_code 126 or 127)
  std::string stdout_data;
  std::string stderr_data;
  bool output_truncated = false;
  double duration_ms = 0;
};

struct SandboxInfo {
  std::string id;
  State state = State::kRunning;
  pid_t init_pid = -1;  // in the host's pid namespace
  uint64_t oom_kills = 0;
  // --net policy: the host side of the sandbox's veth (e.g. "10.213.4.1"),
  // the address the sandbox reaches the host at; empty otherwise.
  std::string host_address;
  // The host uid (and gid) of root inside; ids 0..N-1 inside are
  // host_uid..host_uid+N-1 on the host (N: Options::userns_width). The
  // manager's own uid for a manager without root.
  uint32_t host_uid = 0;
  // The loop device ("/dev/loopN") its on-disk writable layer is on; it
  // detaches when the sandbox's mounts go. Empty without one (no root).
  std::string disk_device;
  std::chrono::system_clock::time_point created;
  std::chrono::system_clock::time_point expires;  // epoch when there is no TTL
};

class Manager {
 public:
  struct Options {
    bool reclaim_leftovers = true;  // remove what killed managers left behind
    // Sandboxes of each built-in image (host, busybox) kept started in the
    // background, so that Create of a spec with default image, mounts,
    // hostname, disk and network only applies limits (why: starting one
    // waits on kernel RCU grace periods for cgroup v1 migration and the
    // old root's unmount, several ms each on a busy VM). 0: none.
    int warm_pool = 0;
    // Fresh network namespaces made in the background (netns_pool.h) for
    // sandboxes without --net policy, which then skip the 0.3 ms a new one
    // costs in clone3. 0: each sandbox clones its own. Root only.
    int netns_pool = 8;
    // Without root there are no cgroups: a spec with a memory, pids, cpus
    // or cpuset limit is refused at Create (naming the field) unless this
    // is set, when it runs without them.
    bool allow_unenforced_limits = false;
    // How long one PutFile or GetFile may take before its helper process
    // is killed (kDeadlineExceeded): a file on a filesystem that never
    // answers costs this much, not a hung call.
    std::chrono::milliseconds file_timeout{10000};
    // How long one teardown attempt waits for a killed sandbox's init to be
    // reaped. A process in uninterruptible sleep keeps it, and a teardown
    // that runs out of time is retried by the reaper (reaper.h) instead of
    // blocking its caller.
    std::chrono::milliseconds teardown_timeout{2000};
    // Retry back-off, workers and shutdown drain of that reaper.
    Reaper::Options reaper;
    // A crash watcher thread (crash_watcher.h): init_exit, oom and
    // rootfs_damage events, and a sandbox whose PID 1 died destroyed at
    // once. Off (a one-shot run that reads no events and destroys its one
    // sandbox itself): no thread, no events of those kinds; a dead init
    // still makes Exec return kUnavailable.
    bool watch_crashes = true;
    // The host ids of sandboxes' user namespaces (root manager): slot s of
    // userns_slots is [userns_base + s * userns_width, + userns_width), one
    // live sandbox a slot, also across managers (uid_ranges.h). Open refuses
    // a range below 65536, past the largest id, or overlapping /etc/subuid
    // or /etc/subgid. The default is [2^30, 2^31).
    uint32_t userns_base = uint32_t{1} << 30;
    uint32_t userns_width = 65536;
    uint32_t userns_slots = 16384;
    // Sandboxes outlive this manager (kept.h; the node agent's choice):
    // its destructor leaves them running, and when it is killed their inits
    // wait for the next manager, which adopts them (Adopt). One that no
    // manager adopts within `orphan_timeout` (or by its TTL) ends on its
    // own. Root only; kept sandboxes start cold (no warm pool).
    bool keep_sandboxes = false;
    std::chrono::milliseconds orphan_timeout{std::chrono::hours(1)};
  };

  // Raises the process's soft descriptor limit to its hard limit (a live
  // sandbox holds four: its init's pidfd and control socket, the OOM
  // notifier and its id range's lock), detects the cgroup layout, loads the
  // device program and reclaims leftovers. Threads: the crash watcher
  // (Options::watch_crashes), the warm pool's (Options::warm_pool) and the
  // netns pool's (Options::netns_pool) start here; the TTL thread starts
  // with the first sandbox that has a TTL. Without root, falls back to user
  // namespaces of the manager's own uid, without resource limits (logged
  // once per process; cgroup_layout() is then "none";
  // Options::allow_unenforced_limits). Returns kFailedPrecondition when the
  // kernel lacks what sandboxes need, kInvalidArgument or
  // kFailedPrecondition for bad userns_* options.
  static Result<std::unique_ptr<Manager>> Open(const Options& options);
  static Result<std::unique_ptr<Manager>> Open() { return Open(Options()); }

  // Destroys every sandbox still held.
  ~Manager();

  Manager(const Manager&) = delete;
  Manager& operator=(const Manager&) = delete;

  // Creates and starts a sandbox; returns its id. With a non-empty
  // client_key, a second Create with the same key returns the first
  // sandbox's id while it exists. Returns kInvalidArgument for a bad spec,
  // kResourceExhausted when every uid range is held, otherwise the failing
  // step (nothing is left behind on failure).
  Result<std::string> Create(const SandboxSpec& spec, const std::string& client_key = "");

  // With Options::keep_sandboxes: the kept sandboxes whose manager is gone
  // and whose init still runs, ready to Adopt, with the annotation each
  // was given (Annotate). Empty otherwise.
  std::vector<std::pair<std::string, std::string>> Orphans();

  // Takes over orphan `id` (its init, cgroups, network policy and disk stay
  // as they are): it is this manager's from now on, as if created here
  // with `spec` and `client_key` (the owner keeps them, e.g. in the
  // annotation). kNotFound when it is gone, kFailedPrecondition when
  // another live manager holds it.
  Status Adopt(const std::string& id, const SandboxSpec& spec, const std::string& client_key = "");

  // Ends orphan `id` without adopting it (an owner that no longer knows
  // it): kills it and removes what is left of it.
  Status DiscardOrphan(const std::string& id);

  // Stores `annotation` in kept sandbox `id`'s record (kept.h), for
  // Orphans() to hand to the next manager. kFailedPrecondition when
  // sandboxes are not kept.
  Status Annotate(const std::string& id, const std::string& annotation);

  // Runs a command and waits for it. A command that cannot be started is a
  // result with start_errno set, not an error. Returns kNotFound for an
  // unknown id, kFailedPrecondition when frozen, kUnavailable when the
  // sandbox died or was destroyed meanwhile.
  Result<ExecResult> Exec(const std::string& id, const ExecRequest& request);

  // The largest signal number Signal accepts (SIGRTMAX on Linux).
  static constexpr int kMaxSignal = 64;

  // Sends `signal` to the process group of the exec running in the sandbox,
  // without waiting for it; the exec's result then reports what the
  // command did (e.g. signal set and exit_code 128 + N when it died of it).
  // Returns kInvalidArgument for a number outside 1..kMaxSignal, kNotFound
  // for an unknown id, kFailedPrecondition when no exec is running or the
  // sandbox is frozen. A signal that races the exec's end is ignored.
  Status Signal(const std::string& id, int signal);

  // Writes a regular file inside the sandbox (its writable layer) as the
  // sandbox's user without capabilities, in its namespaces (file_access.h).
  // `path` is resolved inside the sandbox's root: ".." and symlinks cannot
  // lead out, and a symlink as the last component is refused. Parent
  // directories must exist. Returns kNotFound for an unknown sandbox or a
  // missing parent, kInvalidArgument for a path that is no regular file
  // ("path /tmp/f: a fifo, not a regular file") or runs into a symlink loop,
  // kPermissionDenied where the sandbox's user may not write,
  // kDeadlineExceeded past Options::file_timeout.
  Status PutFile(const std::string& id, const std::string& path, std::string_view data, mode_t mode = 0644);
  // Reads a regular file inside the sandbox, likewise as the sandbox sees it
  // (/proc/kallsyms shows zero addresses); the same errors, and
  // kResourceExhausted above max_bytes.
  Result<std::string> GetFile(const std::string& id, const std::string& path, size_t max_bytes = size_t{64} << 20);

  // Freeze stops every process of the sandbox; Thaw resumes them.
  Status Freeze(const std::string& id);
  Status Thaw(const std::string& id);
  // Copies the tree at `path` (absolute, inside the sandbox) of a frozen
  // sandbox (tree_snapshot.h): what its processes left there, taken while
  // none of them can run or change it. kFailedPrecondition unless frozen;
  // SnapshotTree's errors otherwise.
  Result<TreeSnapshot> SnapshotFrozen(const std::string& id, const std::string& path,
                                      const SnapshotLimits& limits = SnapshotLimits());
  // Writes `snapshot` into the empty directory `path` of a running sandbox,
  // owned by the directory's owner, a user of the sandbox's, else by its
  // root user (RestoreTree, tree_snapshot.h): for a fresh sandbox, one none
  // of the snapshot's processes ever ran in.
  Status RestoreSnapshot(const std::string& id, const std::string& path, const TreeSnapshot& snapshot);

  // Kills everything, removes the cgroups; works from any state. kNotFound
  // for an unknown (or already destroyed) id. When the teardown fails (e.g.
  // the init is not reaped within Options::teardown_timeout) the sandbox is
  // out of service all the same, the reaper retries the rest, and the
  // attempt's error is returned.
  Status Destroy(const std::string& id);

  Result<SandboxInfo> Info(const std::string& id);

  // The sandbox's repercussion events (events.h) after `cursor` (0: from the
  // first), also for a while after it was destroyed. Returns kNotFound for
  // an id this manager never had (or destroyed long ago).
  Result<EventPage> EventsSince(const std::string& id, uint64_t cursor);
  // Like EventsSince, but waits up to `timeout` for a newer event when there
  // is none yet (an empty page on timeout; at once when the sandbox is gone).
  Result<EventPage> WaitEvents(const std::string& id, uint64_t cursor, std::chrono::milliseconds timeout);
  std::vector<std::string> List();

  // "hybrid", "unified", or "none" (no root: user namespaces, no limits).
  const char* cgroup_layout() const;

  // Teardowns that failed and are being retried (pending), and how many
  // attempts failed, finished late or were abandoned so far (reaper.h).
  Reaper::Stats teardown_stats() const;

 private:
  struct Impl;
  explicit Manager(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace flashroll::sandbox
