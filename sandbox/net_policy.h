// NetPolicyManager: default-deny egress for sandboxes, enforced by eBPF.
//
// The sandbox's `--net policy` mode. One manager per process loads five BPF
// programs (sandbox/bpf/net_policy.bpf.c) once:
//   cgroup/connect4, cgroup/connect6    TCP and UDP connect()
//   cgroup/sendmsg4, cgroup/sendmsg6    UDP sendto()/sendmsg() with an address
//   cgroup_skb/egress                   every IP packet a sandbox socket sends:
//                                       raw and ICMP sockets, connected UDP,
//                                       and anything else the hooks above miss
// and shares two maps among all sandboxes: a hash of per-cgroup settings and
// one LPM trie of allow rules keyed by {cgroup id, protocol, port, address
// prefix} (why an LPM trie: a lookup is two O(address bits) probes, exact
// port then any port, independent of how many rules a sandbox has, and CIDR
// ranges need no expansion; per-cgroup rule arrays would need a bounded loop
// per packet and a fixed per-sandbox maximum). Attach() writes a sandbox's
// rules into the maps and then links the programs to the sandbox's cgroup v2
// directory, and pins them in bpffs when asked (bpf_pins.h: the policy then
// holds after the manager is gone, until the pins are removed); the
// returned NetPolicyAttachment detaches the links, removes the pins and
// deletes exactly those map entries when destroyed.
//
// Enforcement: a connect, send or packet from a policed cgroup is allowed
// only if its destination address, port and protocol (TCP or UDP) match a
// rule; everything else (other protocols such as ICMP, non-first IPv4
// fragments, IPv6 extension headers, cgroups created below a sandbox's own)
// is denied with EPERM. With allow_loopback, traffic to the loopback
// addresses and packets routed over "lo" pass; that is only safe when the
// sandbox has its own network namespace, whose loopback is its own.
// Programs attached to a cgroup see sockets created in it (they key on the
// socket's and the caller's cgroup), so the launcher must not hand a sandbox
// sockets created outside it.
//
// Thread safety: NetPolicyManager is thread-safe; Attach may be called
// concurrently. A NetPolicyAttachment is not synchronised; it may be moved to
// and destroyed on any thread, and may outlive the manager.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "sandbox/spec.h"

struct bpf_link;  // libbpf

namespace flashroll::sandbox {

// At most this many allow rules per sandbox. The rule map holds 262,144
// entries for every sandbox of the process, two per rule (TCP and UDP):
// without a bound one sandbox with 131,072 rules fills it, and every later
// sandbox's Attach fails. With it, a full map takes 128 sandboxes at the
// bound (the node API's own maximum, NodePolicy::max_allow_rules, is lower).
inline constexpr size_t kMaxRulesPerSandbox = 1024;

struct NetPolicy {
  std::vector<AllowRule> allow;  // each rule admits both TCP and UDP
  bool allow_loopback = true;
};

struct NetPolicyState;

// The programs' links to one sandbox cgroup and its map entries. Move-only;
// an empty (default-constructed or moved-from) handle owns nothing.
class NetPolicyAttachment {
 public:
  static constexpr int kPrograms = 5;  // connect4, connect6, sendmsg4, sendmsg6, egress

  NetPolicyAttachment() = default;
  NetPolicyAttachment(NetPolicyAttachment&& other) noexcept;
  NetPolicyAttachment& operator=(NetPolicyAttachment&& other) noexcept;
  NetPolicyAttachment(const NetPolicyAttachment&) = delete;
  NetPolicyAttachment& operator=(const NetPolicyAttachment&) = delete;
  // Detaches; a failure is logged (use Detach() to see it).
  ~NetPolicyAttachment();

  // Detaches the links from the cgroup (the programs stop running for it,
  // whoever else holds the links), removes their pins, then deletes the
  // cgroup's rule and setting entries. Returns OK, also when already
  // detached; otherwise the first failed step. The handle is empty
  // afterwards either way.
  Status Detach();

  // Lets go of the links without detaching them, and leaves the map
  // entries: the pinned links keep the policy on the cgroup (a kept sandbox
  // whose manager stops, sandbox.h). The handle is empty afterwards.
  void Abandon();

  bool attached() const { return state_ != nullptr; }
  uint64_t cgroup_id() const { return cgroup_id_; }

 private:
  friend class NetPolicyManager;

  std::shared_ptr<NetPolicyState> state_;
  uint64_t cgroup_id_ = 0;
  std::array<::bpf_link*, kPrograms> links_{};
  std::string pin_dir_;  // empty: not pinned
};

class NetPolicyManager {
 public:
  // Loads the BPF programs and creates the maps. Returns the manager, or
  // AlreadyExists when this process already has one, or attachments of a
  // destroyed one are still alive (programs are loaded once per process;
  // share the manager), or the libbpf failure (PermissionDenied without
  // CAP_BPF/CAP_SYS_ADMIN).
  static Result<std::unique_ptr<NetPolicyManager>> Create();
  // The process's shared manager: created by the first call and kept for
  // the rest of the process's life (the sandbox Manager and anything else
  // in the process use this one). Returns it, or the first Create()'s
  // error, which later calls return too.
  static Result<NetPolicyManager*> Shared();
  ~NetPolicyManager();
  NetPolicyManager(const NetPolicyManager&) = delete;
  NetPolicyManager& operator=(const NetPolicyManager&) = delete;

  // Polices the cgroup v2 directory `cgroup_dir` with `policy`. Call it
  // before the sandbox's first process joins the cgroup (e.g. before
  // clone3 with CLONE_INTO_CGROUP), so there is no unpoliced window. Returns the
  // attachment; InvalidArgument for more than kMaxRulesPerSandbox rules, a rule with a bad family or prefix length,
  // or a path that is not a cgroup v2 directory; AlreadyExists when the
  // cgroup is already policed by this manager; otherwise the failed syscall
  // (e.g. a full map) naming the path and program.
  // With a `pin_dir`, the directory is created (it must not exist) and each
  // link pinned in it under its program's name (connect4, connect6,
  // sendmsg4, sendmsg6, egress); it must be on a bpffs (bpf_pins.h).
  // On failure nothing stays attached, pinned or in the maps.
  Result<NetPolicyAttachment> Attach(const std::string& cgroup_dir, const NetPolicy& policy,
                                     const std::string& pin_dir = "");

  // Kernel ids of the loaded objects, for bpftool and leak checks.
  struct KernelIds {
    std::array<uint32_t, NetPolicyAttachment::kPrograms> programs{};
    uint32_t rules_map = 0;
    uint32_t cgroups_map = 0;
  };
  const KernelIds& kernel_ids() const { return ids_; }

 private:
  explicit NetPolicyManager(std::shared_ptr<NetPolicyState> state, KernelIds ids);

  std::shared_ptr<NetPolicyState> state_;
  KernelIds ids_;
};

// Returns the id of the cgroup v2 directory at `path` (the id
// bpf_get_current_cgroup_id() reports for its members), or InvalidArgument
// when the path is not on a cgroup v2 file system, or the failed syscall.
Result<uint64_t> CgroupV2Id(const std::string& path);

}  // namespace flashroll::sandbox
