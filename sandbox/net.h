// The network step. Every sandbox gets a fresh network namespace
// (CLONE_NEWNET); in mode `none` it holds only loopback, brought up here.
// Mode `policy` (veth plus eBPF allow rules) is not built yet and is
// refused rather than silently run without its policy.
//
// Thread safety: CheckNetParentSide is stateless; NetChild runs only in the
// freshly cloned child.
#pragma once

#include "common/status.h"
#include "sandbox/child_status.h"
#include "sandbox/spec.h"

namespace flashroll::sandbox {

// Returns kUnimplemented for NetMode::kPolicy.
Status CheckNetParentSide(const SandboxSpec& spec);

// Brings up `lo` in the new network namespace.
ChildStatus NetChild();

}  // namespace flashroll::sandbox
