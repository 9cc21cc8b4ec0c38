#!/usr/bin/env bash
# Idle density: COUNT idle busybox sandboxes (256 MiB, 64 pids) actually
# started in one real `flashroll sandboxd`, created over its HTTP API by
# 4 keep-alive clients, then measured while all are live:
#   - the host's MemAvailable drop (median of 3 readings 1 s apart at each
#     end; the machine is shared, so others' memory moves it too);
#   - the manager's own RSS (VmRSS) and descriptors;
#   - kernel Slab, KernelStack, PageTables and Shmem growth;
#   - what the sandboxes' memory cgroups are charged (kernel memory
#     included on cgroup v1).
# Every sandbox is destroyed afterwards and sandboxd stopped. A create that
# fails stops the run; the count reached and the first error are reported.
# So does MemAvailable falling under FLOOR_MIB (the machine is shared).
#
# One manager holds 3 descriptors per idle sandbox; a hard RLIMIT_NOFILE it
# may not raise (no CAP_SYS_RESOURCE in a container) caps it at about
# hard/3 sandboxes. MANAGERS sandboxd processes share COUNT evenly then.
#
# Usage: sudo bench/sandbox_density.sh [FLASHROLL] [COUNT] [MANAGERS] [FLOOR_MIB]
set -euo pipefail
FLASHROLL=$(readlink -f "${1:-build/flashroll}")
COUNT=${2:-10000}
MANAGERS=${3:-1}
FLOOR_MIB=${4:-3072}
WORK=$(mktemp -d /tmp/fr-density.XXXXXX)
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$WORK/token"
chmod 600 "$WORK/token"
# The manager raises its soft limit to the hard one; raise the hard one
# where that is allowed.
ulimit -Hn $((COUNT * 4 / MANAGERS + 4096)) 2>/dev/null || true
echo "descriptor limit (hard): $(ulimit -Hn); managers: $MANAGERS"
PORTS=() PIDS=()
for ((m = 0; m < MANAGERS; m++)); do
  port=$((20000 + RANDOM % 20000))
  "$FLASHROLL" sandboxd --listen "127.0.0.1:$port" --token-file "$WORK/token" > "$WORK/sandboxd.$m.log" 2>&1 &
  PIDS+=($!) PORTS+=($port)
done
trap 'kill -TERM ${PIDS[*]} 2>/dev/null; wait ${PIDS[*]} 2>/dev/null; rm -rf "$WORK"' EXIT
python3 - "$WORK/token" "$COUNT" "$FLOOR_MIB" "${PORTS[*]}" "${PIDS[*]}" <<'PY'
import http.client, json, os, statistics, sys, threading, time
token, count, floor = open(sys.argv[1]).read().strip(), int(sys.argv[2]), int(sys.argv[3]) << 20
ports, daemons = [int(p) for p in sys.argv[4].split()], [int(p) for p in sys.argv[5].split()]
headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
def meminfo():
    out = {}
    for line in open("/proc/meminfo"):
        k, v = line.split(":"); out[k] = int(v.split()[0]) * 1024
    return out
def settle(key):
    v = []
    for _ in range(3):
        time.sleep(1); v.append(meminfo()[key])
    return statistics.median(v)
def kernel():
    m = meminfo(); return m["Slab"] + m["KernelStack"] + m["PageTables"] + m["Shmem"]
def status(key):
    total = 0
    for daemon in daemons:
        for line in open(f"/proc/{daemon}/status"):
            if line.startswith(key + ":"): total += int(line.split()[1]) * 1024
    return total
def fds():
    return sum(len(os.listdir(f"/proc/{d}/fd")) for d in daemons)
def connect(port):
    for _ in range(100):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=120); c.connect(); return c
        except OSError: time.sleep(0.05)
    raise SystemExit("sandboxd did not start")
def call(c, method, path, body=None):
    c.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
    r = c.getresponse(); data = r.read()
    if r.status >= 300: raise RuntimeError(f"{method} {path}: {r.status} {data[:300]!r}")
    return json.loads(data) if data else None
for port in ports: connect(port).close()
avail0, kernel0, rss0 = settle("MemAvailable"), kernel(), status("VmRSS")
fds0 = fds()
ids, errors, lock, reserved = [], [], threading.Lock(), [0]
spec = {"image": "busybox", "memory": "256M", "pids": 64}
start = time.perf_counter()
def worker(port):
    c = connect(port)
    while True:
        with lock:
            if errors or reserved[0] >= count: return
            reserved[0] += 1
            if reserved[0] % 100 == 0 and meminfo()["MemAvailable"] < floor:
                errors.append(f"MemAvailable under the floor of {floor >> 20} MiB"); return
        try: sid = call(c, "POST", "/v1/sandboxes", spec)["id"]
        except Exception as e:
            with lock: errors.append(str(e))
            return
        with lock:
            ids.append((port, sid))
            n = len(ids)
        if n % 1000 == 0: print(f"  {n} live after {time.perf_counter() - start:.0f} s", flush=True)
threads = [threading.Thread(target=worker, args=(ports[i % len(ports)],)) for i in range(max(4, len(ports)))]
for t in threads: t.start()
for t in threads: t.join()
took = time.perf_counter() - start
n = len(ids)
avail1, kernel1, rss1 = settle("MemAvailable"), kernel(), status("VmRSS")
fds1 = fds()
charged = 0
for _, sid in ids:
    try: charged += int(open(f"/sys/fs/cgroup/memory/flashroll/{sid}/memory.usage_in_bytes").read())
    except OSError: pass
# Still alive and answering: one exec in the last sandbox.
alive = call(connect(ids[-1][0]), "POST", f"/v1/sandboxes/{ids[-1][1]}/exec", {"cmd": ["/bin/true"]})["exit_code"] == 0 if ids else False
t0 = time.perf_counter()
left = [0]
def destroyer(mine):
    conns = {}
    for port, sid in mine:
        try: call(conns.setdefault(port, connect(port)), "DELETE", f"/v1/sandboxes/{sid}")
        except Exception:
            with lock: left[0] += 1
threads = [threading.Thread(target=destroyer, args=(ids[i::4],)) for i in range(4)]
for t in threads: t.start()
for t in threads: t.join()
left = left[0]
kib = lambda b: b / 1024
print(f"started {n} of {count} in {took:.0f} s ({n / took:.0f}/s); last one still runs /bin/true: {alive}")
if errors: print("stopped by:", errors[0])
if n:
    print("| measure | total | per sandbox |")
    print("|---|---:|---:|")
    print(f"| host MemAvailable drop | {(avail0 - avail1) / 2**20:.0f} MiB | {kib(avail0 - avail1) / n:.0f} KiB |")
    print(f"| managers' RSS growth ({len(daemons)} sandboxd, VmRSS {rss0 / 2**20:.0f} -> {rss1 / 2**20:.0f} MiB) | {(rss1 - rss0) / 2**20:.0f} MiB | {kib(rss1 - rss0) / n:.1f} KiB |")
    print(f"| kernel Slab + KernelStack + PageTables + Shmem growth | {(kernel1 - kernel0) / 2**20:.0f} MiB | {kib(kernel1 - kernel0) / n:.0f} KiB |")
    print(f"| charged to the sandboxes' memory cgroups | {charged / 2**20:.0f} MiB | {kib(charged) / n:.0f} KiB |")
    print(f"| managers' descriptors ({fds0} -> {fds1}) | {fds1 - fds0} | {(fds1 - fds0) / n:.2f} |")
print(f"destroyed in {time.perf_counter() - t0:.0f} s; {left} failed to destroy")
PY
left=0
for pid in "${PIDS[@]}"; do left=$((left + $(ls /sys/fs/cgroup/memory/flashroll 2>/dev/null | grep -c "^fr-$pid-" || true))); done
echo "leftover sandbox cgroups: $left"
