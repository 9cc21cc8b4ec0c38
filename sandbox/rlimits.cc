#include "sandbox/rlimits.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <iterator>
#include <string>

namespace flashroll::sandbox {

namespace {

constexpr rlim_t kInf = RLIM_INFINITY;
constexpr rlim_t kMiB = rlim_t{1} << 20;

struct SandboxLimit {
  int resource;
  rlim_t soft, hard;
};

// One entry per RLIMIT_*: what is not listed here would be inherited.
constexpr SandboxLimit kSandboxLimits[] = {
    {RLIMIT_CPU, kInf, kInf},                   // the cgroup's cpu.max
    {RLIMIT_FSIZE, kInf, kInf},                 // the writable layer's size
    {RLIMIT_DATA, kInf, kInf},                  // memory.max
    {RLIMIT_STACK, 8 * kMiB, kInf},
    {RLIMIT_CORE, 0, 0},
    {RLIMIT_RSS, kInf, kInf},
    {RLIMIT_NPROC, kInf, kInf},                 // pids.max
    {RLIMIT_NOFILE, 1024, 524288},
    {RLIMIT_MEMLOCK, 8 * kMiB, 8 * kMiB},
    {RLIMIT_AS, kInf, kInf},
    {RLIMIT_LOCKS, kInf, kInf},
    {RLIMIT_SIGPENDING, 65536, 65536},
    {RLIMIT_MSGQUEUE, 819200, 819200},          // the kernel's default
    {RLIMIT_NICE, 0, 0},
    {RLIMIT_RTPRIO, 0, 0},
    {RLIMIT_RTTIME, kInf, kInf},
};
constexpr bool EveryResourceOnce() {
  bool seen[RLIM_NLIMITS] = {};
  for (const SandboxLimit& limit : kSandboxLimits) {
    if (limit.resource < 0 || limit.resource >= RLIM_NLIMITS || seen[limit.resource]) return false;
    seen[limit.resource] = true;
  }
  return std::size(kSandboxLimits) == RLIM_NLIMITS;
}
static_assert(EveryResourceOnce(), "each resource limit once, or one would be inherited from the manager");

}  // namespace

Result<RlimitPlan> PrepareRlimitsParentSide() {
  RlimitPlan plan;
  for (const SandboxLimit& limit : kSandboxLimits) {
    rlimit own {};
    if (::getrlimit(limit.resource, &own) != 0) {
      return Status::FromErrno(errno, "getrlimit(" + std::to_string(limit.resource) + ")");
    }
    rlimit value{limit.soft, std::min(limit.hard, own.rlim_max)};
    value.rlim_cur = std::min(value.rlim_cur, value.rlim_max);
    plan.limits[limit.resource] = value;
  }
  return plan;
}

ChildStatus RlimitsChild(const RlimitPlan& plan) {
  for (int resource = 0; resource < RlimitPlan::kCount; ++resource) {
    if (resource == RLIMIT_NOFILE) continue;  // OpenFilesLimitChild
    if (::syscall(SYS_prlimit64, 0, resource, &plan.limits[resource], nullptr) != 0) {
      return ChildStatus::Errno("rlimits", "prlimit64", nullptr);
    }
  }
  return ChildStatus::Ok();
}

ChildStatus OpenFilesLimitChild(const RlimitPlan& plan) {
  if (::syscall(SYS_prlimit64, 0, RLIMIT_NOFILE, &plan.limits[RLIMIT_NOFILE], nullptr) != 0) {
    return ChildStatus::Errno("rlimits", "prlimit64", "RLIMIT_NOFILE");
  }
  return ChildStatus::Ok();
}

}  // namespace flashroll::sandbox
