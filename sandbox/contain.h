// The order of the isolation steps, in one place.
//
// PrepareContainParentSide runs every step's parent half before the clone:
// it checks the spec and precomputes everything the child will need.
// ContainChild runs the child halves in order, one line each, and ends by
// executing the init; the first failing step fails the sandbox.
//
// Thread safety: PrepareContainParentSide may run on any thread;
// ContainChild runs only in the freshly cloned child.
#pragma once

#include <string>

#include "common/status.h"
#include "sandbox/caps.h"
#include "sandbox/child_status.h"
#include "sandbox/init_binary.h"
#include "sandbox/landlock.h"
#include "sandbox/mount.h"
#include "sandbox/rlimits.h"
#include "sandbox/seccomp.h"
#include "sandbox/spec.h"
#include "sandbox/userns.h"
#include "sandbox/veth.h"

namespace flashroll::sandbox {

struct ContainPlan {
  MountPlan mount;
  std::string hostname;
  CapsPlan caps;
  RlimitPlan rlimits;
  LandlockRules landlock_rules;
  LandlockPlan landlock;
  VethChildPlan veth;  // --net policy: filled in by the caller once the pair exists
  // A fresh network namespace from NetnsPool to join instead of cloning one
  // (-1: clone with CLONE_NEWNET); owned by the caller.
  int netns_fd = -1;
  // kRootless: the child is cloned into a user namespace (the launcher
  // writes its id maps) and waits for them before any filesystem work.
  // kMapped: the child joins `userns_fd` after its mounts (userns.h).
  UsernsMode userns = UsernsMode::kNone;
  int userns_fd = -1;  // kMapped; owned by the caller
  // "exec <profile>": the AppArmor profile the init starts in (apparmor.h);
  // filled in by the caller once the profile is loaded. Empty: none.
  std::string apparmor_exec;
  const SeccompProgram* seccomp = nullptr;  // process-lifetime
  int init_fd = -1;                         // process-lifetime memfd
  // A kept sandbox's (init_protocol.h): the listening socket and uid range
  // lock its init holds (owned by the caller), its orphan and TTL deadlines.
  InitKeep keep;
};

// The Landlock rules every sandbox of `spec` runs under (see contain.cc).
LandlockRules DefaultLandlockRules(const SandboxSpec& spec, const MountPlan& mounts);

// Returns kInvalidArgument for a bad spec, kFailedPrecondition when the
// kernel cannot enforce the isolation stack (e.g. a Landlock ABI below 6),
// or the first failing step's error.
// `userns` says how the sandbox gets its user namespace; kMapped needs
// UseUserNamespace before the launch.
Result<ContainPlan> PrepareContainParentSide(const SandboxSpec& spec, UsernsMode userns);

// kMapped: the sandbox's namespace, which its mounts map through and its
// init joins. `userns` must outlive the launch.
void UseUserNamespace(const UserNamespace& userns, ContainPlan* plan);

// Child side. Waits for the parent's go byte on `sync_fd` before anything
// runs in the v1 cgroups' absence. Does not return on success (the init is
// running); returns the failing step.
ChildStatus ContainChild(const ContainPlan& plan, int sync_fd, int control_fd);

}  // namespace flashroll::sandbox
