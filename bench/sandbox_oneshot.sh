#!/usr/bin/env bash
# One-shot sandboxes as a user starts them: `/bin/true` start-to-exit of
# `flashroll sandbox run`, bwrap, crun run and runc run, each a fresh
# process, taking turns (A B C D A B C D ...) so a busy spell hits all
# alike; median and p90 of RUNS each after WARMUP untimed rounds.
#
# Every contender gets the isolation it supports set to match ours:
#   - the same seccomp rules: our default filter, exported by
#     `flashroll sandbox seccomp-export` as BPF (bwrap --seccomp) and as OCI
#     linux.seccomp (crun, runc; compiled by their libseccomp);
#   - new user, pid, mount, net, uts, ipc (and cgroup) namespaces; crun and
#     runc map root inside to an unprivileged host range (like ours);
#     bwrap, run by root, can only map root to root (no range), with every
#     capability dropped;
#   - no_new_privs, no capabilities; masked /proc paths and read-only
#     /proc/sys etc. (crun, runc; ours masks and mounts likewise);
#   - memory 256 MiB and 64 pids in cgroups (flashroll, crun, runc; bwrap
#     has no cgroup support);
#   - the same read-only rootfs: the busybox tree, and for flashroll and
#     bwrap also the host's /usr ("host" rows).
#
# Usage: sudo bench/sandbox_oneshot.sh [FLASHROLL] [RUNS] [WARMUP]
# Needs root, bubblewrap, crun and runc (Debian packages of those names).
set -euo pipefail

FLASHROLL=$(readlink -f "${1:-build/flashroll}")
RUNS=${2:-60}
WARMUP=${3:-3}
ROOTFS=/var/lib/flashroll/images/busybox
WORK=$(mktemp -d /tmp/fr-oneshot.XXXXXX)
HUGETLB=/sys/fs/cgroup/hugetlb
mounted_hugetlb=0

cleanup() {
  for rt in crun runc; do
    for id in $("$rt" list -q 2>/dev/null | grep '^fr-oneshot-' || true); do "$rt" delete -f "$id" >/dev/null 2>&1 || true; done
  done
  if [ "$mounted_hugetlb" = 1 ]; then
    find "$HUGETLB" -mindepth 1 -depth -type d -exec rmdir {} + 2>/dev/null || true
    umount "$HUGETLB" && rmdir "$HUGETLB"
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

[ "$(id -u)" = 0 ] || { echo "sandbox_oneshot: needs root" >&2; exit 1; }
[ -x "$ROOTFS/bin/true" ] || "$FLASHROLL" sandbox run --image busybox -- /bin/true
# crun refuses this hybrid cgroup layout without a v1 hugetlb hierarchy.
if [ -d /sys/fs/cgroup/memory ] && ! mountpoint -q "$HUGETLB"; then
  mkdir -p "$HUGETLB" && mount -t cgroup -o hugetlb cgroup "$HUGETLB" && mounted_hugetlb=1
fi

"$FLASHROLL" sandbox seccomp-export "$WORK/seccomp.bpf"
"$FLASHROLL" sandbox seccomp-export --format oci "$WORK/seccomp.json"

# One OCI bundle for crun and runc.
mkdir -p "$WORK/bundle"
python3 - "$WORK" "$ROOTFS" <<'PY'
import json, sys
work, rootfs = sys.argv[1], sys.argv[2]
seccomp = json.load(open(f"{work}/seccomp.json"))
config = {
  "ociVersion": "1.0.2",
  "process": {"terminal": False, "user": {"uid": 0, "gid": 0}, "args": ["/bin/true"],
              "env": ["PATH=/bin:/usr/bin"], "cwd": "/", "noNewPrivileges": True,
              "capabilities": {"bounding": [], "effective": [], "permitted": [], "inheritable": [], "ambient": []}},
  "root": {"path": rootfs, "readonly": True},
  "hostname": "sandbox",
  "mounts": [
    {"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev"]},
    {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
    {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev"]},
  ],
  "linux": {
    "namespaces": [{"type": t} for t in ["pid", "network", "ipc", "uts", "mount", "cgroup", "user"]],
    "uidMappings": [{"containerID": 0, "hostID": 1 << 30, "size": 65536}],
    "gidMappings": [{"containerID": 0, "hostID": 1 << 30, "size": 65536}],
    "resources": {"memory": {"limit": 256 << 20}, "pids": {"limit": 64},
                  "devices": [{"allow": False, "access": "rwm"}]},
    "seccomp": seccomp,
    "maskedPaths": ["/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                    "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
                    "/sys/firmware", "/sys/devices/virtual/powercap"],
    "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"],
  },
}
json.dump(config, open(f"{work}/bundle/config.json", "w"), indent=1)
PY

# bwrap applies its mounts in order: the root first, then /proc, /dev, /tmp.
BW_NS=(--unshare-all --unshare-user --uid 0 --gid 0 --die-with-parent --new-session --cap-drop ALL --seccomp 9)
BW_MOUNTS=(--proc /proc --dev /dev --tmpfs /tmp)
python3 - "$RUNS" "$WARMUP" "$WORK/seccomp.bpf" \
  "flashroll run (host)" "$FLASHROLL sandbox run --memory 256M --pids 64 -- /bin/true" \
  "bwrap (host /usr)" "/usr/bin/bwrap ${BW_NS[*]} --ro-bind /usr /usr --symlink usr/lib /lib --symlink usr/lib64 /lib64 --symlink usr/bin /bin ${BW_MOUNTS[*]} /bin/true" \
  "flashroll run (busybox)" "$FLASHROLL sandbox run --image busybox --memory 256M --pids 64 -- /bin/true" \
  "bwrap (busybox)" "/usr/bin/bwrap ${BW_NS[*]} --ro-bind $ROOTFS / ${BW_MOUNTS[*]} /bin/true" \
  "crun run (busybox)" "/usr/bin/crun run --bundle $WORK/bundle fr-oneshot-crun-{i}" \
  "runc run (busybox)" "/usr/sbin/runc run --bundle $WORK/bundle fr-oneshot-runc-{i}" <<'PY'
import os, sys, time, statistics, shlex
runs, warmup, bpf = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
pairs = list(zip(sys.argv[4::2], sys.argv[5::2]))
null = os.open("/dev/null", os.O_RDWR)
times = {name: [] for name, _ in pairs}
fails = {name: 0 for name, _ in pairs}
def once(command, i):
    argv = shlex.split(command.replace("{i}", str(i)))
    filter_fd = os.open(bpf, os.O_RDONLY)  # fd 9 for bwrap --seccomp, read once by it
    actions = [(os.POSIX_SPAWN_DUP2, null, 0), (os.POSIX_SPAWN_DUP2, null, 1), (os.POSIX_SPAWN_DUP2, null, 2),
               (os.POSIX_SPAWN_DUP2, filter_fd, 9)]
    start = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, os.environ, file_actions=actions)
    _, status = os.waitpid(pid, 0)
    elapsed = (time.perf_counter() - start) * 1000
    os.close(filter_fd)
    return elapsed, status == 0
for i in range(warmup + runs):
    for name, command in pairs:
        elapsed, ok = once(command, i)
        if i < warmup: continue
        times[name].append(elapsed)
        fails[name] += 0 if ok else 1
print(f"| contender | median | p90 | min | runs | failed |")
print(f"|---|---:|---:|---:|---:|---:|")
for name, _ in pairs:
    v = sorted(times[name])
    print(f"| {name} | {statistics.median(v):.2f} ms | {v[int(0.9 * (len(v) - 1))]:.2f} ms | {v[0]:.2f} ms | {len(v)} | {fails[name]} |")
PY
