#include "sandbox/device_policy.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <cerrno>
#include <memory>

// Generated at build time by sandbox/bpf/bpf.cmake (bpftool gen skeleton).
#include "device_policy.skel.h"

namespace flashroll::sandbox {

DevicePolicy::~DevicePolicy() { device_policy_bpf::destroy(skel_); }

Result<DevicePolicy*> DevicePolicy::Load() {
  std::unique_ptr<DevicePolicy> policy(new DevicePolicy());
  policy->skel_ = device_policy_bpf::open_and_load();
  if (policy->skel_ == nullptr) {
    return Status::FromErrno(errno, "load BPF object device_policy.bpf.o (bpf_object__load)");
  }
  bpf_prog_info info {};
  uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(bpf_program__fd(policy->skel_->progs.fr_device_policy), &info, &len) != 0) {
    return Status::FromErrno(errno, "bpf_obj_get_info_by_fd program fr_device_policy");
  }
  policy->program_id_ = info.id;
  return policy.release();
}

Result<const DevicePolicy*> DevicePolicy::Shared() {
  // Never destroyed: the program must outlive every attach call, also late
  // in exit; once attached, cgroups hold it themselves.
  static Result<DevicePolicy*>* const shared = new Result<DevicePolicy*>(Load());
  if (!shared->ok()) return shared->status();
  return const_cast<const DevicePolicy*>(shared->value());
}

Status DevicePolicy::Attach(int cgroup_fd, const std::string& what) const {
  if (bpf_prog_attach(bpf_program__fd(skel_->progs.fr_device_policy), cgroup_fd, BPF_CGROUP_DEVICE, 0) != 0) {
    return Status::FromErrno(errno, "device policy: bpf(BPF_PROG_ATTACH, BPF_CGROUP_DEVICE) to cgroup " + what);
  }
  return Status::Ok();
}

}  // namespace flashroll::sandbox
