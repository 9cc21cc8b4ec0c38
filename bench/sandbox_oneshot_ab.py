#!/usr/bin/env python3
# Two flashroll binaries' `sandbox run -- /bin/true`, start to exit, taking
# turns (A B, B A, ...) so a busy spell hits both alike; median, p10, p90.
# Usage: sudo python3 bench/sandbox_oneshot_ab.py OLD NEW RUNS [sandbox run flags...]
import subprocess, sys, time, statistics
bins = sys.argv[1:3]; runs = int(sys.argv[3]); extra = sys.argv[4:]
t = {b: [] for b in bins}
for b in bins:
    for _ in range(3): subprocess.run([b, "sandbox", "run", *extra, "--", "/bin/true"], check=True)
for i in range(runs):
    order = bins if i % 2 == 0 else bins[::-1]
    for b in order:
        s = time.perf_counter(); subprocess.run([b, "sandbox", "run", *extra, "--", "/bin/true"], check=True); t[b].append((time.perf_counter() - s) * 1e3)
for b in bins:
    v = sorted(t[b]); print(f"{b}: median {statistics.median(v):.1f} ms p10 {v[len(v)//10]:.1f} p90 {v[len(v)*9//10]:.1f} n {len(v)}")
