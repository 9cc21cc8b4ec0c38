// The privilege step: drop every capability for good and set no_new_privs.
//
// The sandbox keeps uid 0 (files in images are owned by root) but holds no
// capability: the bounding and ambient sets are emptied, the effective,
// permitted and inheritable sets cleared, and the securebits locked so that
// exec as uid 0 grants nothing back (SECBIT_NOROOT). no_new_privs makes
// setuid binaries and file capabilities inert and lets an unprivileged
// process install the seccomp filter.
//
// Thread safety: PrepareCapsParentSide is stateless; CapsChild runs only in
// the freshly cloned child.
#pragma once

#include "common/status.h"
#include "sandbox/child_status.h"

namespace flashroll::sandbox {

struct CapsPlan {
  int last_cap = 0;  // from /proc/sys/kernel/cap_last_cap
};

// Reads the kernel's highest capability number.
Result<CapsPlan> PrepareCapsParentSide();

// Any failure fails the sandbox: a sandbox with capabilities left is not one.
ChildStatus CapsChild(const CapsPlan& plan);

}  // namespace flashroll::sandbox
