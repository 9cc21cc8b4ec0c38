#include "sandbox/contain.h"

#include <unistd.h>

#include <cerrno>

#include "sandbox/cgroup.h"
#include "sandbox/init_binary.h"
#include "sandbox/net.h"
#include "sandbox/uts.h"

namespace flashroll::sandbox {

Result<ContainPlan> PrepareContainParentSide(const SandboxSpec& spec) {
  FR_RETURN_IF_ERROR(ValidateSpec(spec));
  FR_RETURN_IF_ERROR(CheckNetParentSide(spec));
  ContainPlan plan;
  FR_ASSIGN_OR_RETURN(plan.mount, PrepareMountsParentSide(spec));
  plan.hostname = spec.hostname;
  FR_ASSIGN_OR_RETURN(plan.caps, PrepareCapsParentSide());
  FR_ASSIGN_OR_RETURN(plan.seccomp, DefaultSeccompProgram());
  FR_ASSIGN_OR_RETURN(plan.init_fd, InitBinaryFd());
  return plan;
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
  // The filesystem work overlaps with the parent attaching the v1 cgroups:
  // both wait on RCU grace periods (umount, cgroup migration), and this
  // way a start pays for one, not two. Nothing the sandbox runs executes
  // before the handshake.
  FR_CHILD_STEP(MountChild(plan.mount));
  FR_CHILD_STEP(UtsChild(plan.hostname));
  FR_CHILD_STEP(NetChild());
  FR_CHILD_STEP(AwaitParentChild(sync_fd));
  FR_CHILD_STEP(CgroupNamespaceChild());
  FR_CHILD_STEP(CapsChild(plan.caps));
  FR_CHILD_STEP(SeccompChild(*plan.seccomp));
  return ExecInitChild(plan.init_fd, control_fd);
#undef FR_CHILD_STEP
}

}  // namespace flashroll::sandbox
