// The network step. Every sandbox gets a fresh network namespace (cloned
// with CLONE_NEWNET, or made ahead of time by NetnsPool and joined) whose
// loopback is brought up here; in mode `none` that is all it holds. Mode `policy` adds a veth pair (veth.h) and the eBPF allow
// rules on the sandbox's cgroup (net_policy.h), both set up by the manager.
//
// Thread safety: CheckNetParentSide is stateless; NetChild and
// JoinNetnsChild change the calling thread's namespace state (the freshly
// cloned child, or the pool's own thread).
#pragma once

#include "common/status.h"
#include "sandbox/child_status.h"
#include "sandbox/spec.h"

namespace flashroll::sandbox {

// Returns kInvalidArgument for an allow rule the veth cannot route: the
// link carries IPv4 only, so an IPv6 rule would admit nothing.
Status CheckNetParentSide(const SandboxSpec& spec);

// Brings up `lo` in the new network namespace.
ChildStatus NetChild();

// Lets every uid of the sandbox bind ports below 1024 in its network
// namespace (net.ipv4.ip_unprivileged_port_start = 0), as Docker does: the
// namespace belongs to the host's user namespace, where the sandbox's
// CAP_NET_BIND_SERVICE counts for nothing, and a web server binding :80 is
// ordinary work. The knob is the namespace's own; the host's stays as it
// is. Runs before the mounts, while the host's /proc is still there (the
// sandbox's /proc/sys is read-only).
ChildStatus UnprivilegedPortsChild();

// Joins the pooled network namespace `netns_fd` (see netns_pool.h).
ChildStatus JoinNetnsChild(int netns_fd);

}  // namespace flashroll::sandbox
