#include "sandbox/landlock.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "sandbox/child_status.h"
#include "sandbox/unique_fd.h"

namespace flashroll::sandbox {
namespace {

// Landlock UAPI, defined here rather than taken from <linux/landlock.h>:
// Debian bookworm's kernel headers stop at ABI 2 and lack the truncate (ABI 3),
// network (ABI 4), device ioctl (ABI 5) and scoping (ABI 6) definitions. Values are
// the kernel's (include/uapi/linux/landlock.h) and never change.
constexpr uint32_t kCreateRulesetVersion = 1u << 0;
constexpr int kRulePathBeneath = 1;
constexpr int kRuleNetPort = 2;

// Full size of the ABI 6 attribute struct. Older kernels accept it as long as
// the fields they do not know are zero (copy_struct_from_user semantics).
struct RulesetAttr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;
  uint64_t scoped;
};

struct PathBeneathAttr {
  uint64_t allowed_access;
  int32_t parent_fd;
} __attribute__((packed));

struct NetPortAttr {
  uint64_t allowed_access;
  uint64_t port;
};

constexpr uint64_t kFsExecute = 1ull << 0;
constexpr uint64_t kFsWriteFile = 1ull << 1;
constexpr uint64_t kFsReadFile = 1ull << 2;
constexpr uint64_t kFsReadDir = 1ull << 3;
constexpr uint64_t kFsRemoveDir = 1ull << 4;
constexpr uint64_t kFsRemoveFile = 1ull << 5;
constexpr uint64_t kFsMakeChar = 1ull << 6;
constexpr uint64_t kFsMakeDir = 1ull << 7;
constexpr uint64_t kFsMakeReg = 1ull << 8;
constexpr uint64_t kFsMakeSock = 1ull << 9;
constexpr uint64_t kFsMakeFifo = 1ull << 10;
constexpr uint64_t kFsMakeBlock = 1ull << 11;
constexpr uint64_t kFsMakeSym = 1ull << 12;
constexpr uint64_t kFsRefer = 1ull << 13;     // ABI 2
constexpr uint64_t kFsTruncate = 1ull << 14;  // ABI 3
constexpr uint64_t kFsIoctlDev = 1ull << 15;  // ABI 5

constexpr uint64_t kNetBindTcp = 1ull << 0;     // ABI 4
constexpr uint64_t kNetConnectTcp = 1ull << 1;  // ABI 4

constexpr uint64_t kScopeAbstractUnixSocket = 1ull << 0;  // ABI 6
constexpr uint64_t kScopeSignal = 1ull << 1;              // ABI 6

constexpr int kAbiNet = 4;
constexpr int kAbiScope = 6;

// Rights that apply to a non-directory; adding a directory-only right to a
// file rule is EINVAL.
constexpr uint64_t kFsFileRights = kFsExecute | kFsWriteFile | kFsReadFile | kFsTruncate | kFsIoctlDev;

constexpr uint64_t kFsReadRights = kFsReadFile | kFsReadDir;
constexpr uint64_t kFsTreeRights = kFsReadRights | kFsExecute | kFsRemoveDir | kFsRemoveFile | kFsMakeDir |
                                   kFsMakeReg | kFsMakeSock | kFsMakeFifo | kFsMakeSym | kFsRefer;
constexpr uint64_t kFsWriteRights = kFsWriteFile | kFsRemoveDir | kFsRemoveFile | kFsMakeChar |
                                    kFsMakeDir | kFsMakeReg | kFsMakeSock | kFsMakeFifo | kFsMakeBlock |
                                    kFsMakeSym | kFsRefer | kFsTruncate | kFsIoctlDev;

// Filesystem rights the kernel can handle at each ABI.
uint64_t FsRightsForAbi(int abi) {
  uint64_t rights =
      kFsExecute | kFsReadRights | (kFsWriteRights & ~(kFsRefer | kFsTruncate | kFsIoctlDev));
  if (abi >= 2) rights |= kFsRefer;
  if (abi >= 3) rights |= kFsTruncate;
  if (abi >= 5) rights |= kFsIoctlDev;
  return rights;
}

// Without REFER (ABI 1) Landlock always denies moving files between
// directories, which is stricter, not weaker; without TRUNCATE (ABI < 3)
// truncate(2) escapes the rules and without IOCTL_DEV (ABI < 5) device
// ioctls do, so full filesystem enforcement needs ABI 5.
constexpr int kAbiFsComplete = 5;

bool RequestsFs(const LandlockRules& r) { return r.restrict_fs; }
bool RequestsTcp(const LandlockRules& r) { return r.restrict_tcp_bind || r.restrict_tcp_connect; }
bool RequestsScope(const LandlockRules& r) { return r.scope_signals || r.scope_abstract_unix_sockets; }

long CreateRuleset(const RulesetAttr* attr, size_t size, uint32_t flags) {
  return syscall(SYS_landlock_create_ruleset, attr, size, flags);
}

// The Landlock step's errors; static strings only (see child_status.h).
ChildStatus Failed(const char* call, const char* arg) {
  return ChildStatus::Errno("landlock", call, arg);
}

ChildStatus AddPathRules(int ruleset_fd, const std::vector<std::string>& paths, uint64_t rights,
                         uint64_t handled, bool skip_missing) {
  for (const std::string& path : paths) {
    UniqueFd fd(open(path.c_str(), O_PATH | O_CLOEXEC));
    if (!fd.valid() && skip_missing && errno == ENOENT) continue;
    if (!fd.valid()) return Failed("open(O_PATH)", path.c_str());
    struct stat st;
    if (fstat(fd.get(), &st) != 0) return Failed("fstat", path.c_str());
    PathBeneathAttr attr{};
    attr.allowed_access = rights & handled;
    if (!S_ISDIR(st.st_mode)) attr.allowed_access &= kFsFileRights;
    attr.parent_fd = fd.get();
    if (syscall(SYS_landlock_add_rule, ruleset_fd, kRulePathBeneath, &attr, 0) != 0) {
      return Failed("landlock_add_rule(LANDLOCK_RULE_PATH_BENEATH)", path.c_str());
    }
  }
  return ChildStatus::Ok();
}

ChildStatus AddPortRules(int ruleset_fd, const std::vector<uint16_t>& ports, uint64_t right) {
  for (uint16_t port : ports) {
    NetPortAttr attr{};
    attr.allowed_access = right;
    attr.port = port;
    if (syscall(SYS_landlock_add_rule, ruleset_fd, kRuleNetPort, &attr, 0) != 0) {
      return Failed("landlock_add_rule(LANDLOCK_RULE_NET_PORT)",
                    right == kNetBindTcp ? "tcp bind port" : "tcp connect port");
    }
  }
  return ChildStatus::Ok();
}

bool NoNewPrivsSet() { return prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1; }

}  // namespace

Result<int> LandlockAbiVersion() {
  long abi = CreateRuleset(nullptr, 0, kCreateRulesetVersion);
  if (abi < 0) {
    int err = errno;
    Status status = Status::FromErrno(err, "landlock_create_ruleset(LANDLOCK_CREATE_RULESET_VERSION)");
    if (err == ENOSYS || err == EOPNOTSUPP) {
      return Status::FailedPrecondition(status.message() + " (Landlock is not enabled in this kernel)");
    }
    return status;
  }
  return static_cast<int>(abi);
}

Result<LandlockPlan> PlanLandlock(const LandlockRules& rules, int abi) {
  LandlockPlan plan;
  if (!RequestsFs(rules) && !RequestsTcp(rules) && !RequestsScope(rules)) return plan;

  auto lacking = [abi](const char* feature, int needed) {
    return Status::FailedPrecondition(std::string("Landlock ") + feature + " needs ABI " +
                                      std::to_string(needed) + ", kernel offers " +
                                      (abi > 0 ? "ABI " + std::to_string(abi) : "no Landlock"));
  };
  if (RequestsFs(rules)) {
    if (abi < kAbiFsComplete && !rules.best_effort_fs)
      return lacking("filesystem rules", kAbiFsComplete);
    if (abi >= 1) plan.handled_access_fs = FsRightsForAbi(abi);
    plan.fs_degraded = abi < kAbiFsComplete;
  }
  if (RequestsTcp(rules)) {
    if (abi < kAbiNet && !rules.best_effort_tcp) return lacking("TCP port rules", kAbiNet);
    if (abi >= kAbiNet) {
      if (rules.restrict_tcp_bind) plan.handled_access_net |= kNetBindTcp;
      if (rules.restrict_tcp_connect) plan.handled_access_net |= kNetConnectTcp;
    }
    plan.tcp_degraded = abi < kAbiNet;
  }
  if (RequestsScope(rules)) {
    if (abi < kAbiScope && !rules.best_effort_scope) return lacking("scoping", kAbiScope);
    if (abi >= kAbiScope) {
      if (rules.scope_signals) plan.scoped |= kScopeSignal;
      if (rules.scope_abstract_unix_sockets) plan.scoped |= kScopeAbstractUnixSocket;
    }
    plan.scope_degraded = abi < kAbiScope;
  }
  if (plan.handled_access_fs != 0 || plan.handled_access_net != 0 || plan.scoped != 0) plan.abi = abi;
  return plan;
}

Result<LandlockPlan> PrepareLandlockParentSide(const LandlockRules& rules) {
  int abi = 0;
  Status probe_failure;
  if (RequestsFs(rules) || RequestsTcp(rules) || RequestsScope(rules)) {
    Result<int> probed = LandlockAbiVersion();
    if (probed.ok()) {
      abi = *probed;
    } else if (probed.status().code() == Code::kFailedPrecondition) {
      // No Landlock is ABI 0: planning fails unless every requested feature
      // is best-effort.
      probe_failure = probed.status();
    } else {
      return probed.status();
    }
  }
  Result<LandlockPlan> planned = PlanLandlock(rules, abi);
  if (!planned.ok() && !probe_failure.ok()) return planned.status().Wrap(probe_failure.message());
  return planned;
}

ChildStatus LandlockChild(const LandlockRules& rules, const LandlockPlan& plan) {
  if (plan.abi == 0) return ChildStatus::Ok();
  if (!NoNewPrivsSet()) {
    errno = EPERM;
    return Failed("landlock_restrict_self", "(no_new_privs is not set)");
  }
  RulesetAttr attr{};
  attr.handled_access_fs = plan.handled_access_fs;
  attr.handled_access_net = plan.handled_access_net;
  attr.scoped = plan.scoped;
  UniqueFd ruleset(static_cast<int>(CreateRuleset(&attr, sizeof(attr), 0)));
  if (!ruleset.valid()) return Failed("landlock_create_ruleset", nullptr);

  if (plan.handled_access_fs != 0) {
    uint64_t handled = plan.handled_access_fs;
    const bool skip = rules.skip_missing_paths;
    ChildStatus s = AddPathRules(ruleset.get(), rules.read_only_paths, kFsReadRights, handled, skip);
    if (s.ok())
      s = AddPathRules(ruleset.get(), rules.executable_paths, kFsReadRights | kFsExecute, handled, skip);
    if (s.ok())
      s = AddPathRules(ruleset.get(), rules.read_write_paths, kFsReadRights | kFsWriteRights, handled, skip);
    if (s.ok()) s = AddPathRules(ruleset.get(), rules.tree_paths, kFsTreeRights, handled, skip);
    if (!s.ok()) return s;
  }
  if (plan.handled_access_net & kNetBindTcp) {
    ChildStatus s = AddPortRules(ruleset.get(), rules.tcp_bind_ports, kNetBindTcp);
    if (!s.ok()) return s;
  }
  if (plan.handled_access_net & kNetConnectTcp) {
    ChildStatus s = AddPortRules(ruleset.get(), rules.tcp_connect_ports, kNetConnectTcp);
    if (!s.ok()) return s;
  }
  if (syscall(SYS_landlock_restrict_self, ruleset.get(), 0) != 0)
    return Failed("landlock_restrict_self", nullptr);
  return ChildStatus::Ok();
}

Status ApplyLandlock(const LandlockRules& rules, LandlockPlan* plan_out) {
  FR_ASSIGN_OR_RETURN(LandlockPlan plan, PrepareLandlockParentSide(rules));
  if (plan_out != nullptr) *plan_out = plan;
  if (plan.abi != 0 && !NoNewPrivsSet()) {
    return Status::FailedPrecondition(
        "landlock: no_new_privs must be set before landlock_restrict_self");
  }
  ChildStatus status = LandlockChild(rules, plan);
  if (status.ok()) return Status::Ok();
  std::string what = std::string(status.step) + ": " + status.call;
  if (status.arg != nullptr) what += std::string(" ") + status.arg;
  return Status::FromErrno(status.err, what);
}

}  // namespace flashroll::sandbox
