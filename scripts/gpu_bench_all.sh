#!/usr/bin/env bash
# One GPU lease's measurements for docs/BENCHMARKS.md (issue 24), run on the
# GPU machine from the repository root after scripts/device-run.sh staged
# .gpu/: the GPU tests, the copy bandwidth, `bench decode` on random
# Qwen3-8B and Qwen3-0.6B shapes at batch 1 and 64, 8B-width parity and
# parity on Qwen3-30B-A3B's expert layout with 2 layers ("moe").
# Each result is appended to $OUT/results.txt (one line of JSON per run,
# after a '# command' line); logs go to $OUT/log.txt.
# "profile" times 300 kernels of batch-1 decode on the 8B shape under Nsight
# Compute, "profile64" 300 kernels of decode at 64 sequences; the 8B model
# stays in /tmp/q8b until "0.6b" or "moe" needs the disk.
# "bandwidth" measures the device-to-device copy (PyTorch, 4 GiB, median of
# 10 after 3 warm-ups; read + written), the bound's denominator.
# "base" makes the later steps run the bundle staged in .gpu/base/ (an older
# build, for a before/after in one lease), "use:DIR" the one in .gpu/DIR/,
# "new" the one in .gpu/ again.
#   bash .gpu/gpu_bench_all.sh [tests] [bandwidth] [8b] [0.6b] [parity] [moe] [profile] [profile64]
#     [base|use:DIR|new]
#   (default: tests 8b 0.6b parity moe)
set -uo pipefail
out="${OUT:-/tmp/out}"
mkdir -p "$out"
steps=("$@")
[[ ${#steps[@]} -eq 0 ]] && steps=(tests 8b 0.6b parity moe)
run="bash .gpu/run.sh"
profile() {  # batch, launches to skip (past the prefill), where the CSV goes
  [[ -d /tmp/q8b ]] || record python3 .gpu/gpu_wide_parity.py /tmp/q8b 36 --make-only
  $run ncu --clock-control none --launch-skip "$2" --launch-count 300 --csv \
    --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed \
    flashroll bench decode --model /tmp/q8b --device cuda --batch "$1" --context 64 --gen 8 \
    --prefill-tokens 64 --repeats 1 --json >"$3" 2>>"$out/log.txt"
  echo "# profile at batch $1 ($run)" >>"$out/results.txt"
  python3 - "$3" >>"$out/results.txt" <<'PY'
import csv, collections, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]; name = head.index("Kernel Name"); metric = head.index("Metric Name"); value = head.index("Metric Value")
unit = head.index("Metric Unit"); scale = {"nsecond": 1, "usecond": 1e3, "msecond": 1e6}
grid = head.index("Grid Size") if "Grid Size" in head else None
time, dram = collections.defaultdict(list), collections.defaultdict(list)
by_grid = collections.defaultdict(list)
for r in rows[1:]:
    k = r[name].split("(")[0].split("<")[0].split("::")[-1]
    v = float(r[value].replace(",", "")) * scale.get(r[unit], 1)
    (time if r[metric] == "gpu__time_duration.sum" else dram)[k].append(v)
    if grid is not None and r[metric] == "gpu__time_duration.sum":
        by_grid[(k, r[grid])].append(v)
for k in sorted(time, key=lambda k: -sum(time[k])):
    print(f"# profile {k}: {len(time[k])} launches, {sum(time[k])/1e3:.1f} us total, "
          f"mean dram {sum(dram[k])/max(len(dram[k]),1):.0f}% of peak")
for (k, g) in sorted(by_grid, key=lambda kg: -sum(by_grid[kg])):
    t = by_grid[(k, g)]
    print(f"#   {k} grid {g}: {len(t)} launches, mean {sum(t)/len(t)/1e3:.1f} us")
PY
}
record() {
  echo "# $(date +%T) $*" >>"$out/results.txt"
  $run "$@" 2>>"$out/log.txt" | tail -1 >>"$out/results.txt"
}
for step in "${steps[@]}"; do
  case "$step" in
    tests)
      echo "# $(date +%T) cuda_tests" >>"$out/results.txt"
      $run cuda_tests 2>&1 | tee "$out/cuda_tests.txt" | grep -E "^\[  (PASSED|FAILED) |FAILED|OK \]" ;;
    bandwidth)
      echo "# $(date +%T) copy bandwidth" >>"$out/results.txt"
      python3 - >>"$out/results.txt" 2>>"$out/log.txt" <<'PY'
import json, torch
a = torch.empty(1 << 31, dtype=torch.bfloat16, device="cuda"); b = torch.empty_like(a); times = []
for _ in range(13):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); b.copy_(a); e.record(); e.synchronize(); times.append(s.elapsed_time(e) / 1e3)
print(json.dumps({"copy_bandwidth_GBps": round(2 * a.numel() * 2 / sorted(times[3:])[5] / 1e9, 1),
                  "gpu": torch.cuda.get_device_name()}))
PY
      ;;
    base) run="bash .gpu/base/run.sh" ;;
    use:*) run="bash .gpu/${step#use:}/run.sh" ;;
    new) run="bash .gpu/run.sh" ;;
    8b)
      [[ -d /tmp/q8b ]] || record python3 .gpu/gpu_wide_parity.py /tmp/q8b 36 --make-only
      record flashroll bench decode --model /tmp/q8b --device cuda --batch 1 --context 64 --gen 64 \
        --prefill-tokens 64 --repeats 3 --json
      record flashroll bench decode --model /tmp/q8b --device cuda --batch 64 --context 64 --gen 32 \
        --prefill-tokens 64 --repeats 1 --json ;;
    0.6b)
      rm -rf /tmp/q8b
      record python3 .gpu/gpu_wide_parity.py /tmp/q06b 28 --make-only --shape=0.6b
      record flashroll bench decode --model /tmp/q06b --device cuda --batch 1 --context 64 --gen 64 \
        --prefill-tokens 64 --repeats 3 --json
      record flashroll bench decode --model /tmp/q06b --device cuda --batch 64 --context 64 --gen 32 \
        --prefill-tokens 64 --repeats 1 --json ;;
    profile) profile 1 1200 "$out/profile.csv" ;;
    # Past 2,600 launches main's build (2026-12-08) was still in 512-row steps, prefill chunks
    # mixed with decode rows (the scheduler mixes them), not decode alone.
    profile64) profile 64 2600 "$out/profile64.csv" ;;
    parity)
      record python3 .gpu/gpu_wide_parity.py /tmp/wide 2 ;;
    moe)
      rm -rf /tmp/q8b
      record python3 .gpu/gpu_wide_parity.py /tmp/moe 2 --shape=30b-a3b
      rm -rf /tmp/moe ;;
    *) echo "unknown step $step" >&2; exit 2 ;;
  esac
done
cat "$out/results.txt"
