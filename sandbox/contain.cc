#include "sandbox/contain.h"

#include <unistd.h>

#include <cerrno>

#include "sandbox/apparmor.h"
#include "sandbox/cgroup.h"
#include "sandbox/init_binary.h"
#include "sandbox/net.h"
#include "sandbox/uts.h"

namespace flashroll::sandbox {

// Landlock, a second fence behind the mount namespace (it holds even if a
// mount is misconfigured or a kernel bug lets a path through). The overlay
// root is the sandbox's own writable layer, and a sandbox may wreck its
// trees: an agent that deletes /etc or /var damages only itself, and the
// manager reports that as a rootfs_damage event. So:
//   - "/" is readable and executable, nothing more: no entry is created,
//     removed or renamed directly under it, and nothing is written beneath
//     it that no rule below grants;
//   - the writable layer's top-level trees (MountPlan::writable_root_entries:
//     /etc, /tmp, /var, /root, ... of the image, not /proc, /sys and /dev)
//     and every --rw path are fully read-write and executable;
//   - a read-only bind of the host (the host image's /usr, and /bin, /lib,
//     ... through their symlinks into it) gets no write right at all: were
//     its mount ever writable, Landlock still refuses;
//   - in /dev only null, zero, full, random, urandom, tty, pts and shm are
//     writable, and no device node can be created: device writes and
//     ioctls elsewhere, and writes to /proc and /sys files (e.g.
//     /proc/self/oom_score_adj, /proc/sys), are denied;
//   - with --net policy, TCP connect() is limited to the allowed ports
//     (unless a rule allows any port): the eBPF policy checks addresses and
//     UDP, Landlock backs the ports up in the LSM layer;
//   - signals and abstract unix sockets cannot reach outside the sandbox.
// Fail closed: every feature is required (filesystem rules need Landlock
// ABI 5, scoping ABI 6); a kernel that cannot enforce one refuses to start
// sandboxes rather than starting them with less isolation.
LandlockRules DefaultLandlockRules(const SandboxSpec& spec, const MountPlan& mounts) {
  LandlockRules rules;
  rules.restrict_fs = true;
  rules.skip_missing_paths = true;
  for (const auto& name : mounts.writable_root_entries) {
    if (name != "proc" && name != "sys" && name != "dev") rules.read_write_paths.push_back("/" + name);
  }
  for (const char* dev : {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty",
                          "/dev/pts", "/dev/shm"}) {
    rules.read_write_paths.push_back(dev);
  }
  for (const auto& path : spec.rw_paths) rules.read_write_paths.push_back(path);
  // Files written in the writable trees may be run (scripts, built tools),
  // and anything may be read and run.
  rules.executable_paths = rules.read_write_paths;
  rules.executable_paths.push_back("/");
  if (spec.net == NetMode::kPolicy) {
    bool any_port = false;
    for (const auto& rule : spec.allow) {
      if (rule.port == 0) any_port = true;
      else rules.tcp_connect_ports.push_back(rule.port);
    }
    rules.restrict_tcp_connect = !any_port;
  }
  rules.scope_signals = true;
  rules.scope_abstract_unix_sockets = true;
  return rules;
}

Result<ContainPlan> PrepareContainParentSide(const SandboxSpec& spec, UsernsMode userns) {
  if (userns == UsernsMode::kRootless && spec.net == NetMode::kPolicy) {
    return Status::FailedPrecondition("--net policy: needs root (veth and BPF); the manager runs without");
  }
  FR_RETURN_IF_ERROR(ValidateSpec(spec));
  FR_RETURN_IF_ERROR(CheckNetParentSide(spec));
  ContainPlan plan;
  plan.userns = userns;
  FR_ASSIGN_OR_RETURN(plan.mount, PrepareMountsParentSide(spec, userns));
  plan.hostname = spec.hostname;
  FR_ASSIGN_OR_RETURN(plan.caps, PrepareCapsParentSide());
  FR_ASSIGN_OR_RETURN(plan.rlimits, PrepareRlimitsParentSide());
  plan.landlock_rules = DefaultLandlockRules(spec, plan.mount);
  FR_ASSIGN_OR_RETURN(plan.landlock, PrepareLandlockParentSide(plan.landlock_rules));
  FR_ASSIGN_OR_RETURN(plan.seccomp, SeccompProgramFor(spec.seccomp));
  FR_ASSIGN_OR_RETURN(plan.init_fd, InitBinaryFd());
  return plan;
}

void UseUserNamespace(const UserNamespace& userns, ContainPlan* plan) {
  plan->userns_fd = userns.fd();
  plan->mount.idmap_userns_fd = userns.fd();
  plan->mount.owner_uid = userns.range().base;
  plan->mount.owner_gid = userns.range().base;
}

namespace {

// The handshake: blocks until the parent has attached this process to the
// cgroups that CLONE_INTO_CGROUP does not reach.
ChildStatus AwaitParentChild(int sync_fd) {
  char go = 0;
  ssize_t n;
  do {
    n = ::read(sync_fd, &go, 1);
  } while (n < 0 && errno == EINTR);
  if (n != 1) return ChildStatus::Errno("handshake", "read", "go byte");
  return ChildStatus::Ok();
}

}  // namespace

ChildStatus ContainChild(const ContainPlan& plan, int sync_fd, int control_fd) {
#define FR_CHILD_STEP(expr)             \
  do {                                  \
    const ChildStatus step_ = (expr);   \
    if (!step_.ok()) return step_;      \
  } while (0)
  // The filesystem work overlaps with the parent attaching the v1 cgroups
  // (and moving the --net policy veth in, which eth0's set-up waits for):
  // both wait on RCU grace periods (umount, cgroup migration), and this
  // way a start pays for one, not two. Nothing the sandbox runs executes
  // before the handshake.
  // In a user namespace of its own nothing can be created before the
  // parent has written the id maps, so there the handshake comes first.
  const bool rootless = plan.userns == UsernsMode::kRootless;
  if (rootless) FR_CHILD_STEP(AwaitParentChild(sync_fd));
  // Before the mounts: /sys shows the network namespace it is mounted in.
  if (plan.netns_fd >= 0) FR_CHILD_STEP(JoinNetnsChild(plan.netns_fd));
  FR_CHILD_STEP(UnprivilegedPortsChild());
  FR_CHILD_STEP(MountChild(plan.mount));
  FR_CHILD_STEP(UtsChild(plan.hostname));
  FR_CHILD_STEP(NetChild());
  if (!rootless) FR_CHILD_STEP(AwaitParentChild(sync_fd));
  FR_CHILD_STEP(VethChild(plan.veth));
  FR_CHILD_STEP(CgroupNamespaceChild());
  // Before Landlock, which denies writes under /proc.
  FR_CHILD_STEP(AppArmorChild(plan.apparmor_exec));
  // Before the user namespace: setting limits is a privileged step too.
  FR_CHILD_STEP(RlimitsChild(plan.rlimits));
  // Last of the steps that need the host's root.
  FR_CHILD_STEP(JoinUserNamespaceChild(plan.userns_fd));
  FR_CHILD_STEP(CapsChild(plan.caps));
  FR_CHILD_STEP(LandlockChild(plan.landlock_rules, plan.landlock));
  FR_CHILD_STEP(SeccompChild(*plan.seccomp));
  return ExecInitChild(plan.init_fd, control_fd, plan.keep, plan.rlimits);
#undef FR_CHILD_STEP
}

}  // namespace flashroll::sandbox
