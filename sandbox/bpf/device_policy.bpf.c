// Flashroll per-sandbox device policy, enforced in the kernel.
//
// fr_device_policy (cgroup/dev) runs on every open and mknod of a device
// node by a process of the sandbox's cgroup v2 directory, whatever mount the
// node is on. It allows the character devices the sandbox's /dev provides
// and nothing else: a device node that reaches the sandbox some other way
// (made on the host in an --rw directory, or bound in as an --rw path
// itself) cannot be opened (EPERM). The user-space half is
// sandbox/device_policy.cc.
#include <linux/bpf.h>

#include <bpf/bpf_helpers.h>

// Character device numbers (Documentation/admin-guide/devices.txt).
#define FR_MEM_MAJOR 1       // 3 null, 5 zero, 7 full, 8 random, 9 urandom
#define FR_TTYAUX_MAJOR 5    // 0 tty, 2 ptmx
#define FR_PTS_MAJOR_FIRST 136  // the devpts pseudo-terminals, 136..143
#define FR_PTS_MAJOR_LAST 143

SEC("cgroup/dev")
int fr_device_policy(struct bpf_cgroup_dev_ctx* ctx) {
  // access_type: the device type in the low 16 bits, BPF_DEVCG_ACC_* above.
  const __u32 type = ctx->access_type & 0xffff;
  const __u32 major = ctx->major;
  const __u32 minor = ctx->minor;
  if (type != BPF_DEVCG_DEV_CHAR) return 0;
  if (major == FR_MEM_MAJOR) return minor == 3 || minor == 5 || minor == 7 || minor == 8 || minor == 9;
  if (major == FR_TTYAUX_MAJOR) return minor == 0 || minor == 2;
  return major >= FR_PTS_MAJOR_FIRST && major <= FR_PTS_MAJOR_LAST;
}

char LICENSE[] SEC("license") = "GPL";
