// The device step: a sandbox may open only the character devices its /dev
// provides (null, zero, full, random, urandom, tty, ptmx and the devpts
// pseudo-terminals); every other device node, however it reached the
// sandbox, fails to open with EPERM, and no other node can be made.
//
// Enforced by a BPF_PROG_TYPE_CGROUP_DEVICE program
// (sandbox/bpf/device_policy.bpf.c) attached to the sandbox's fresh cgroup
// v2 directory before its first process enters it. The attachment is the
// legacy BPF_PROG_ATTACH kind, owned by the cgroup rather than by a
// descriptor of the manager: it holds for as long as the cgroup exists,
// which is as long as any process of the sandbox can, also after the
// manager was killed, and goes with the cgroup's removal. Device programs
// run for the cgroup v2 tree whether or not a v1 devices hierarchy is
// mounted, so it works in both cgroup layouts. Root only (CAP_BPF and
// CAP_SYS_ADMIN); a manager without root has no cgroups, and its sandboxes'
// user namespace already forbids device nodes of their own.
//
// Thread safety: DevicePolicy is immutable after Load; Attach may be called
// concurrently.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

struct device_policy_bpf;  // the generated skeleton

namespace flashroll::sandbox {

class DevicePolicy {
 public:
  // The process's program, loaded by the first call and kept for the rest
  // of the process's life; returns it, or the load's error (e.g.
  // PermissionDenied without root), which later calls return too.
  static Result<const DevicePolicy*> Shared();

  ~DevicePolicy();
  DevicePolicy(const DevicePolicy&) = delete;
  DevicePolicy& operator=(const DevicePolicy&) = delete;

  // Attaches the program to the cgroup v2 directory open as `cgroup_fd`
  // (`what` names it in errors). Returns the failed bpf(BPF_PROG_ATTACH)
  // (e.g. EEXIST: the cgroup already has a device program).
  Status Attach(int cgroup_fd, const std::string& what) const;

  // The program's kernel id, for bpftool and tests.
  uint32_t program_id() const { return program_id_; }

 private:
  DevicePolicy() = default;
  static Result<DevicePolicy*> Load();

  device_policy_bpf* skel_ = nullptr;
  uint32_t program_id_ = 0;
};

}  // namespace flashroll::sandbox
