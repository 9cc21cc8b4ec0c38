// The network step. Every sandbox gets a fresh network namespace
// (CLONE_NEWNET) whose loopback is brought up here; in mode `none` that is
// all it holds. Mode `policy` adds a veth pair (veth.h) and the eBPF allow
// rules on the sandbox's cgroup (net_policy.h), both set up by the manager.
//
// Thread safety: CheckNetParentSide is stateless; NetChild runs only in the
// freshly cloned child.
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

}  // namespace flashroll::sandbox
