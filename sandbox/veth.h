// The link of a `--net policy` sandbox: one veth pair per sandbox.
//
// The host side, "frv<N>", stays in the host's network namespace with the
// address 10.213.x.y+1/30; the sandbox side is created as "frp<N>" next to
// it and moved into the sandbox's network namespace as eth0, where the
// child gives it 10.213.x.y+2/30 and a default route via the host side.
// N (0..16383) picks the /30 in 10.213.0.0/16; it is claimed by creating
// the pair with NLM_F_EXCL, so managers in different processes never share
// one. No NAT or forwarding is set up: what a sandbox can reach is the host
// itself (its addresses), and the eBPF policy (net_policy.h) decides which
// address, port and protocol of those it may use.
//
// Reclaim: the kernel deletes the pair when the sandbox's network namespace
// goes away; the host side carries the sandbox's name as its ifalias (and
// its creator's pid as its group, set atomically at creation, for the moment
// before the alias is set), so a pair that a killed manager left in the host
// namespace (killed between creating it and starting the sandbox) is found
// and removed by ReclaimVeths.
//
// Thread safety: Veth::Create and ReclaimVeths may run concurrently on any
// thread; a Veth is used by one thread at a time. VethChild runs only in
// the freshly cloned child.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "sandbox/child_status.h"

namespace flashroll::sandbox {

inline constexpr char kVethHostPrefix[] = "frv";
inline constexpr char kVethPeerPrefix[] = "frp";

// What the child configures inside (addresses in network byte order).
struct VethChildPlan {
  bool enabled = false;
  uint32_t address = 0;  // the sandbox side's address
  uint32_t gateway = 0;  // the host side's address
  uint32_t netmask = 0;
};

class Veth {
 public:
  // Creates the pair for the sandbox `sandbox_name` and brings the host side
  // up with its address. Returns the pair; kResourceExhausted when all
  // 16384 /30s are taken; otherwise the failed netlink request or ioctl,
  // naming the interface. Nothing is left behind on failure.
  static Result<Veth> Create(const std::string& sandbox_name);

  Veth() = default;
  Veth(Veth&& other) noexcept;
  Veth& operator=(Veth&& other) noexcept;
  Veth(const Veth&) = delete;
  Veth& operator=(const Veth&) = delete;
  ~Veth();  // Remove(), failures logged

  // Moves the sandbox side into the network namespace of `pid`, renamed to
  // eth0. Returns the failed netlink request otherwise.
  Status MoveIntoNetns(pid_t pid);

  // Deletes the pair (by interface index, so a pair that already vanished
  // with its namespace and whose name another sandbox reuses is never
  // touched). Returns OK also when it is already gone.
  Status Remove();

  // Forgets the pair without deleting it (a kept sandbox whose manager
  // stops, sandbox.h); the handle owns nothing afterwards.
  void Abandon() { host_index_ = 0; }

  const std::string& host_name() const { return host_name_; }
  const VethChildPlan& child_plan() const { return child_; }
  uint32_t host_address() const { return child_.gateway; }  // network byte order

 private:
  std::string host_name_;
  std::string peer_name_;
  int host_index_ = 0;  // 0: owns nothing
  VethChildPlan child_;
};

// Child side, after the parent moved the peer in: gives eth0 its address,
// brings it up and adds the default route (raw ioctls, no allocation).
ChildStatus VethChild(const VethChildPlan& plan);

// Removes the host sides of pairs whose owner (named by the ifalias, see
// naming.h, or before that by the creator pid in the group) is no longer
// running. Returns the
// interface names it removed, or the first failure.
Result<std::vector<std::string>> ReclaimVeths();

// Names of the host-side interfaces of sandbox pairs that exist now (for
// leak checks).
std::vector<std::string> ListVeths();

}  // namespace flashroll::sandbox
