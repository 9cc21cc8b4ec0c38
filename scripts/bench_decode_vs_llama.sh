#!/usr/bin/env bash
# Flashroll's engine side by side with llama.cpp on the same GGUF files, in the
# same run, interleaved, with the machine's read-bandwidth bound measured
# between them (issue 10, "Speed"). Prints a markdown table of medians.
#
#   scripts/bench_decode_vs_llama.sh [--runs 3] [--threads 2] [--models DIR]
#       [--files "a.gguf b.gguf"] [--llama-bin DIR] [--flashroll PATH]
#       [--bandwidth PATH] [--out DIR] [--ours-repeats 1] [--batched-types q8_0|all]
#       [--boost] [--no-batched] [--no-long] [--no-ours] [--no-llama]
#
# Defaults: the nine files of scripts/make_bench_models.py in build/bench-models
# (made when missing), llama.cpp's binaries in $LLAMA_BIN or
# /tmp/fr-llama.cpp/build/bin (llama.cpp is built from a fetched tree outside
# this repository and never committed: docs/BENCHMARKS.md says how),
# build/flashroll, build/bench/bandwidth_bench, raw outputs under
# build/bench-results/decode-vs-llama-DATE/.
#
# Each run visits every file once and, for each, runs in turn (the order of
# the two engines alternates between runs, so a busy spell does not always hit
# the same one):
#   bound     bandwidth_bench --threads T --json                    (GB/s)
#   llama     llama-bench -m F -t T -p 512 -n 128 -r 1 -o jsonl     (pp512, tg128)
#   ours      flashroll bench decode --model F --threads T --batch 1 --context 64 --gen 64
#               --prefill-tokens 512 --repeats 1 --json   (decode after 64 tokens; prefill of 512)
#   batched   llama-batched-bench -m F -t T -c 8192 -b 2048 -ub 512 -npp 128 -ntg 128 -npl 32
#             flashroll bench decode ... --batch 32 --context 128 --gen 128 --prefill-tokens 1
#   long      (smollm135m-q8_0 only) flashroll ... --batch 1 --context 4096 --gen 64, against
#             the --context 64 figure; llama-bench -p 0 -n 32 -d 0,4096
# The 32-sequence pair runs on the Q8_0 files only unless --batched-types all
# (or a comma list of types). --boost runs the script in a session of its own
# (setsid) whose scheduler autogroup gets nice -20: on a 2-vCPU machine shared
# with other work, llama.cpp's spinning thread barrier loses 10-40x whenever
# one of its two threads is preempted, while Flashroll's pool (work claimed per
# task) degrades in proportion, so a loaded machine measures the neighbours,
# not the engines. The boost leaves other sessions ~5% of the CPU while it
# runs. (SCHED_FIFO is no substitute: `bench decode` times tokens from the
# thread that reads them, which a real-time engine thread keeps off the CPU.)
# Every tool does its own warm-up; each of ours is one measured run after one
# warm-up (--ours-repeats), as llama-bench -r 1 is: the medians are over runs.
# The table gives medians over runs, ours / llama.cpp, and each engine's share
# of the bound: weight bytes read per decoded token (every matrix; a tied
# embedding counts once, as the output matrix) × tokens/s ÷ bound.
set -euo pipefail

SELF=$(readlink -f "$0")
cd "$(dirname "$SELF")/.."
RUNS=3
THREADS=2
MODELS_DIR=build/bench-models
FILES=""
LLAMA_BIN=${LLAMA_BIN:-/tmp/fr-llama.cpp/build/bin}
FLASHROLL=build/flashroll
BANDWIDTH=build/bench/bandwidth_bench
OUT=""
BATCHED=1
LONG=1
OURS=1
LLAMA=1
TIMEOUT=900
OURS_REPEATS=1
BATCHED_TYPES=q8_0
BOOST=0
ARGS=("$@")

usage() { sed -n '2,/^set -e/{/^set -e/d;s/^# \{0,1\}//;p}' "$SELF"; exit "${1:-2}"; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --runs) RUNS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --models) MODELS_DIR=$2; shift 2 ;;
    --files) FILES=$2; shift 2 ;;
    --llama-bin) LLAMA_BIN=$2; shift 2 ;;
    --flashroll) FLASHROLL=$2; shift 2 ;;
    --bandwidth) BANDWIDTH=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --ours-repeats) OURS_REPEATS=$2; shift 2 ;;
    --batched-types) BATCHED_TYPES=$2; shift 2 ;;
    --boost) BOOST=1; shift ;;
    --no-batched) BATCHED=0; shift ;;
    --no-long) LONG=0; shift ;;
    --no-ours) OURS=0; shift ;;
    --no-llama) LLAMA=0; shift ;;
    -h|--help) usage 0 ;;
    *) echo "bench_decode_vs_llama: unknown argument '$1'" >&2; usage 2 ;;
  esac
done

if [[ $BOOST == 1 && -z ${FR_BENCH_BOOSTED:-} ]]; then
  FR_BENCH_BOOSTED=1 exec setsid -w "$SELF" "${ARGS[@]}"
fi
if [[ $BOOST == 1 ]]; then
  echo -20 > /proc/self/autogroup || { echo "bench_decode_vs_llama: --boost needs root and CONFIG_SCHED_AUTOGROUP" >&2; exit 2; }
fi

log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }
die() { echo "bench_decode_vs_llama: $*" >&2; exit 2; }

if [[ -z "$FILES" ]]; then
  if [[ ! -d "$MODELS_DIR" ]] || ! ls "$MODELS_DIR"/*.gguf >/dev/null 2>&1; then
    log "making the benchmark models in $MODELS_DIR"
    /usr/bin/python3 scripts/make_bench_models.py "$MODELS_DIR" >&2
  fi
  for m in stories15m stories110m smollm135m; do
    for t in q8_0 q4_0 bf16; do
      [[ -f "$MODELS_DIR/$m-$t.gguf" ]] && FILES+="$MODELS_DIR/$m-$t.gguf "
    done
  done
fi
[[ -n "${FILES// /}" ]] || die "no model files"
for f in $FILES; do [[ -f "$f" ]] || die "$f: no such file"; done
[[ -x "$BANDWIDTH" ]] || die "$BANDWIDTH: not built (cmake --build build --target bandwidth_bench)"
if [[ $LLAMA == 1 ]]; then
  for b in llama-bench llama-batched-bench; do
    [[ -x "$LLAMA_BIN/$b" ]] || die "$LLAMA_BIN/$b: not built (see docs/BENCHMARKS.md, 'Engine decode vs llama.cpp')"
  done
fi
if [[ $OURS == 1 ]] && ! "$FLASHROLL" bench decode --help >/dev/null 2>&1; then
  log "$FLASHROLL has no 'bench decode' command: measuring llama.cpp and the bound only"
  OURS=0
fi

OUT=${OUT:-build/bench-results/decode-vs-llama-$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
{
  echo "date_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host_cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "nproc=$(nproc)"
  echo "threads=$THREADS runs=$RUNS sched=$([[ $BOOST == 1 ]] && echo 'autogroup-nice-20' || echo normal)"
  echo "flashroll=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- engine 2>/dev/null || echo '+dirty-engine')"
  if [[ $LLAMA == 1 ]]; then
    echo "llama_cpp_commit=$(git -C "$LLAMA_BIN/../.." rev-parse --short HEAD 2>/dev/null || echo unknown)"
  fi
} > "$OUT/meta.txt"
log "raw outputs in $OUT"
if [[ $OURS == 1 ]]; then  # a rebuild of build/ during the run must not change what is measured
  cp "$FLASHROLL" "$OUT/flashroll"
  FLASHROLL=$OUT/flashroll
fi

# run NAME CMD...: stdout to $dir/NAME, stderr to $dir/NAME.err; a failure is
# recorded, not fatal.
run() {
  local name=$1; shift
  local rc=0
  timeout "$TIMEOUT" "$@" > "$dir/$name" 2> "$dir/$name.err" || rc=$?
  if [[ $rc != 0 ]]; then
    log "  $name failed (exit $rc): $(tail -n 1 "$dir/$name.err")"
    echo "exit $rc" > "$dir/$name.failed"
  fi
}

ours_single() {
  run ours-b1-c64.json "$FLASHROLL" bench decode --model "$f" --threads "$THREADS" --batch 1 --context 64 \
    --gen 64 --prefill-tokens 512 --repeats "$OURS_REPEATS" --json
}
llama_single() {
  run llama-bench.jsonl "$LLAMA_BIN/llama-bench" -m "$f" -t "$THREADS" -p 512 -n 128 -r 1 -o jsonl
}
ours_batched() {
  run ours-b32-c128.json "$FLASHROLL" bench decode --model "$f" --threads "$THREADS" --batch 32 --context 128 \
    --gen 128 --prefill-tokens 1 --repeats "$OURS_REPEATS" --json
}
llama_batched() {
  run llama-batched.jsonl "$LLAMA_BIN/llama-batched-bench" -m "$f" -t "$THREADS" -tb "$THREADS" -c 8192 -b 2048 \
    -ub 512 -npp 128 -ntg 128 -npl 32 --output-format jsonl
}
ours_long() {
  run ours-b1-c4096.json "$FLASHROLL" bench decode --model "$f" --threads "$THREADS" --batch 1 --context 4096 \
    --gen 64 --prefill-tokens 1 --repeats "$OURS_REPEATS" --json
}
llama_long() {
  run llama-depth.jsonl "$LLAMA_BIN/llama-bench" -m "$f" -t "$THREADS" -p 0 -n 32 -d 0,4096 -r 1 -o jsonl
}

for ((r = 1; r <= RUNS; r++)); do
  for f in $FILES; do
    name=$(basename "$f" .gguf)
    dir="$OUT/run$r/$name"
    mkdir -p "$dir"
    cat /proc/loadavg > "$dir/load-start"
    log "run $r/$RUNS $name (load $(cut -d' ' -f1 /proc/loadavg))"
    run bandwidth.json "$BANDWIDTH" --threads "$THREADS" --passes 5 --json
    sides="llama ours"
    if (( r % 2 == 0 )); then sides="ours llama"; fi
    for side in $sides; do
      if [[ $side == llama && $LLAMA == 0 ]] || [[ $side == ours && $OURS == 0 ]]; then continue; fi
      "${side}_single"
      type=${name##*-}
      if [[ $BATCHED == 1 ]] && [[ $BATCHED_TYPES == all || ,$BATCHED_TYPES, == *,$type,* ]]; then
        "${side}_batched"
      fi
      if [[ $LONG == 1 && $name == smollm135m-q8_0 ]]; then "${side}_long"; fi
    done
    cat /proc/loadavg > "$dir/load-end"
  done
done

/usr/bin/python3 - "$OUT" $FILES <<'PY' | tee "$OUT/table.md"
import json, os, statistics, struct, sys

out, files = sys.argv[1], sys.argv[2:]
TYPE_SIZE = {0: (1, 4), 1: (1, 2), 2: (32, 18), 8: (32, 34), 30: (1, 2)}  # ggml type: (block, bytes)

def weight_bytes(path):
    """Bytes of the matrices read once per decoded token (norms included)."""
    with open(path, "rb") as f:
        data = f.read(64 << 20)
    off = 4
    version, n_tensors, n_kv = struct.unpack_from("<IQQ", data, off); off += 20
    def rstr():
        nonlocal off
        (n,) = struct.unpack_from("<Q", data, off); off += 8
        s = data[off:off + n]; off += n
        return s.decode("utf-8", "replace")
    scalar = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    def skip(t):
        nonlocal off
        if t == 8: rstr()
        elif t == 9:
            et, n = struct.unpack_from("<IQ", data, off); off += 12
            if et == 8:
                for _ in range(n): rstr()
            else: off += scalar[et] * n
        else: off += scalar[t]
    for _ in range(n_kv):
        rstr(); (t,) = struct.unpack_from("<I", data, off); off += 4; skip(t)
    sizes = {}
    for _ in range(n_tensors):
        name = rstr(); (nd,) = struct.unpack_from("<I", data, off); off += 4
        dims = struct.unpack_from("<%dQ" % nd, data, off); off += 8 * nd
        t, _ = struct.unpack_from("<IQ", data, off); off += 12
        n = 1
        for d in dims: n *= d
        block, size = TYPE_SIZE.get(t, (1, 0))
        sizes[name] = n // block * size
    if "output.weight" in sizes:
        sizes.pop("token_embd.weight", None)  # untied: only one row of the embedding is read
    return sum(sizes.values())

def load(path):
    try:
        if os.path.exists(path + ".failed"): return []
        with open(path) as f:
            return [json.loads(l) for l in f if l.strip().startswith("{")]
    except (OSError, ValueError):
        return []

def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None

runs = sorted(d for d in os.listdir(out) if d.startswith("run"))
rows, loads = [], []
for path in files:
    name = os.path.basename(path)[:-5]
    m = {k: [] for k in ("bw", "l_tg", "l_pp", "o_tg", "o_pp", "l_b", "o_b", "o_4096", "l_d0", "l_d4096")}
    for r in runs:
        d = os.path.join(out, r, name)
        for lf in ("load-start", "load-end"):
            try: loads.append(float(open(os.path.join(d, lf)).read().split()[0]))
            except (OSError, ValueError, IndexError): pass
        for j in load(os.path.join(d, "bandwidth.json")): m["bw"].append(j.get("gb_per_s"))
        for j in load(os.path.join(d, "llama-bench.jsonl")):
            if j.get("n_prompt") == 512 and j.get("n_gen") == 0: m["l_pp"].append(j.get("avg_ts"))
            if j.get("n_prompt") == 0 and j.get("n_gen") == 128: m["l_tg"].append(j.get("avg_ts"))
        for j in load(os.path.join(d, "llama-depth.jsonl")):
            if j.get("n_gen") == 32 and j.get("n_depth") == 0: m["l_d0"].append(j.get("avg_ts"))
            if j.get("n_gen") == 32 and j.get("n_depth") == 4096: m["l_d4096"].append(j.get("avg_ts"))
        for j in load(os.path.join(d, "llama-batched.jsonl")): m["l_b"].append(j.get("speed_tg"))
        for j in load(os.path.join(d, "ours-b1-c64.json")): m["o_tg"].append(j.get("tokens_per_s"))
        for j in load(os.path.join(d, "ours-b1-c64.json")): m["o_pp"].append(j.get("prefill_tokens_per_s"))
        for j in load(os.path.join(d, "ours-b32-c128.json")): m["o_b"].append(j.get("tokens_per_s"))
        for j in load(os.path.join(d, "ours-b1-c4096.json")): m["o_4096"].append(j.get("tokens_per_s"))
    rows.append((name, weight_bytes(path), {k: med(v) for k, v in m.items()}, {k: len([x for x in v if x]) for k, v in m.items()}))

def f(x, nd=0):
    return "—" if x is None else ("{:,.%df}" % nd).format(x)
def u(x, unit, nd=0):
    return "—" if x is None else f(x, nd) + " " + unit
def ratio(a, b):
    return "—" if a is None or b is None or b == 0 else "%.2f×" % (a / b)
def pct(tps, wb, bw):
    return "—" if tps is None or bw is None else "%.0f%%" % (100 * tps * wb / 1e9 / bw)

print()
meta = dict(kv.split("=", 1) for line in open(os.path.join(out, "meta.txt")) for kv in line.split() if "=" in kv)
print("Medians of %d run(s); load average %s–%s during the runs; threads %s; scheduling %s."
      % (len(runs), f(min(loads), 1) if loads else "?", f(max(loads), 1) if loads else "?",
         meta.get("threads", "?"), meta.get("sched", "?")))
print()
print("| model | weights read/token | bound | llama.cpp tg128 | ours decode (ctx 64) | ours / llama.cpp | llama.cpp % of bound | ours % of bound |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for name, wb, v, n in rows:
    print("| %s | %.1f MB | %s | %s | %s | %s | %s | %s |" % (
        name, wb / 1e6, u(v["bw"], "GB/s", 1), u(v["l_tg"], "t/s"), u(v["o_tg"], "t/s"), ratio(v["o_tg"], v["l_tg"]),
        pct(v["l_tg"], wb, v["bw"]), pct(v["o_tg"], wb, v["bw"])))
print()
print("| model | llama.cpp pp512 | ours prefill 512 | ours / llama.cpp | llama.cpp 32 seqs (tg) | ours 32 seqs | ours / llama.cpp |")
print("|---|---:|---:|---:|---:|---:|---:|")
for name, wb, v, n in rows:
    print("| %s | %s | %s | %s | %s | %s | %s |" % (
        name, u(v["l_pp"], "t/s"), u(v["o_pp"], "t/s"), ratio(v["o_pp"], v["l_pp"]),
        u(v["l_b"], "t/s"), u(v["o_b"], "t/s"), ratio(v["o_b"], v["l_b"])))
for name, wb, v, n in rows:
    if v["o_4096"] is not None or v["l_d4096"] is not None:
        print()
        print("%s, one sequence, decode at 4096 tokens of context vs at 64 (ours) / vs at 0 (llama.cpp, tg32 at depth 0 and 4096):"
              % name)
        print("ours %s vs %s t/s = %s; llama.cpp %s vs %s t/s = %s" % (
            f(v["o_4096"]), f(v["o_tg"]), ratio(v["o_4096"], v["o_tg"]),
            f(v["l_d4096"]), f(v["l_d0"]), ratio(v["l_d4096"], v["l_d0"])))
PY
