#!/usr/bin/env bash
# The service path: a real `flashroll sandboxd --listen --token-file`
# process and HTTP/1.1 keep-alive clients on loopback (bearer token, JSON).
#   - create + exec /bin/true + destroy, one client, one cycle at a time;
#   - exec round trip of /bin/true on one live sandbox;
#   - churn: CLIENTS clients (threads, one connection each) doing the
#     create + exec + destroy cycle at once for SECONDS; cycles per second.
#   - time to interactive (create sent -> first exec answered), p50/p90/p99,
#     at one client and at CLIENTS.
# Absolute figures: a one-shot CLI (bench/sandbox_oneshot.sh) pays process
# start-up and manager open each time, the service pays neither.
#
# Usage: sudo bench/sandbox_service.sh [FLASHROLL] [RUNS] [CLIENTS] [SECONDS]
set -euo pipefail
FLASHROLL=$(readlink -f "${1:-build/flashroll}")
RUNS=${2:-200}
CLIENTS=${3:-8}
SECONDS_=${4:-10}
WORK=$(mktemp -d /tmp/fr-service.XXXXXX)
PORT=$((20000 + RANDOM % 20000))
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$WORK/token"
chmod 600 "$WORK/token"
"$FLASHROLL" sandboxd --listen "127.0.0.1:$PORT" --token-file "$WORK/token" > "$WORK/sandboxd.log" 2>&1 &
DAEMON=$!
trap 'kill -TERM $DAEMON 2>/dev/null; wait $DAEMON 2>/dev/null; rm -rf "$WORK"' EXIT
python3 - "$PORT" "$WORK/token" "$RUNS" "$CLIENTS" "$SECONDS_" <<'PY'
import http.client, json, statistics, sys, threading, time
port, token = int(sys.argv[1]), open(sys.argv[2]).read().strip()
runs, clients, seconds = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
def connect():
    for _ in range(100):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=60); c.connect(); return c
        except OSError:
            time.sleep(0.05)
    raise SystemExit("sandboxd did not start")
def call(c, method, path, body=None):
    c.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
    r = c.getresponse(); data = r.read()
    if r.status >= 300: raise RuntimeError(f"{method} {path}: {r.status} {data[:200]!r}")
    return json.loads(data) if data else None
spec = {"image": "busybox"}
def cycle(c):
    """One create + exec + destroy; returns the time to interactive in ms
    (the create sent to the first exec answered)."""
    t = time.perf_counter()
    sid = call(c, "POST", "/v1/sandboxes", spec)["id"]
    out = call(c, "POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["/bin/true"]})
    tti = (time.perf_counter() - t) * 1000
    assert out["exit_code"] == 0, out
    call(c, "DELETE", f"/v1/sandboxes/{sid}")
    return tti
def row(name, v):
    v = sorted(v)
    print(f"| {name} | {statistics.median(v):.2f} ms | {v[int(0.9 * (len(v) - 1))]:.2f} ms | {v[int(0.99 * (len(v) - 1))]:.2f} ms | {len(v)} |")
c = connect()
for _ in range(5): cycle(c)
cycles, ttis = [], []
for _ in range(runs):
    t = time.perf_counter(); ttis.append(cycle(c)); cycles.append((time.perf_counter() - t) * 1000)
sid = call(c, "POST", "/v1/sandboxes", spec)["id"]
for _ in range(5): call(c, "POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["/bin/true"]})
execs = []
for _ in range(runs):
    t = time.perf_counter(); call(c, "POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["/bin/true"]})
    execs.append((time.perf_counter() - t) * 1000)
call(c, "DELETE", f"/v1/sandboxes/{sid}")
done, errors, churn_ms, churn_tti = [0], [], [], []
lock = threading.Lock()
deadline = time.perf_counter() + seconds
def worker():
    wc = connect()
    while time.perf_counter() < deadline:
        t = time.perf_counter()
        try: tti = cycle(wc)
        except Exception as e:
            with lock: errors.append(str(e))
            continue
        with lock: done[0] += 1; churn_ms.append((time.perf_counter() - t) * 1000); churn_tti.append(tti)
start = time.perf_counter()
threads = [threading.Thread(target=worker) for _ in range(clients)]
for t in threads: t.start()
for t in threads: t.join()
elapsed = time.perf_counter() - start
print("| path | median | p90 | p99 | n |")
print("|---|---:|---:|---:|---:|")
row("time to interactive (create -> first exec answered), one client", ttis)
row(f"time to interactive, {clients} clients at once", churn_tti)
row("create + exec /bin/true + destroy, one client", cycles)
row("exec /bin/true round trip on a live sandbox", execs)
row(f"create + exec + destroy, {clients} clients at once (each cycle)", churn_ms)
print(f"\nchurn: {done[0] / elapsed:.0f} cycles/s with {clients} clients over {elapsed:.1f} s; {len(errors)} failed")
if errors: print("first error:", errors[0])
PY
