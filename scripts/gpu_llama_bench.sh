#!/usr/bin/env bash
# Flashroll's CUDA backend and llama.cpp side by side on the GPU machine, in
# one lease, on the same random bf16 weights (issue 24; docs/BENCHMARKS.md):
# the copy bandwidth (PyTorch, before and after), `flashroll bench decode` at
# batch 1 and 64, the same safetensors converted to a bf16 GGUF by
# llama.cpp's converter (gguf_no_vocab.py), `llama-bench` (batch 1) and
# `llama-batched-bench` (64 sequences). Run from the repository root after
# scripts/device-run.sh staged .gpu/ (with .gpu/llama-src.tar.xz, see
# gpu_llama_build.sh):
#   bash .gpu/gpu_llama_bench.sh [8b|0.6b]
# llama.cpp builds in the background while the model is made and
# converted; the engines then run one after the other on an idle host (a
# 16-job build would slow either engine's host thread). Each result is
# appended to $OUT/results.txt after a '# command' line.
set -uo pipefail
shape="${1:-8b}"
out="${OUT:-/tmp/out}"
mkdir -p "$out" /tmp/llama/pack
run="bash .gpu/run.sh"
build=""
if [[ ! -x /tmp/llama/pack/bin/llama-bench ]]; then
  [[ -f /tmp/llama/CMakeLists.txt ]] || tar -C /tmp/llama -xJf .gpu/llama-src.tar.xz  # the converter is in it
  bash .gpu/gpu_llama_build.sh .gpu/llama-src.tar.xz "$out" >"$out/llama-build.log" 2>&1 &
  build=$!
fi
llama_env=(env LD_LIBRARY_PATH=/tmp/llama/pack/lib)
record() {
  echo "# $*" >>"$out/results.txt"
  "$@" 2>>"$out/log.txt" | tail -"${tail_lines:-1}" >>"$out/results.txt"
}
model=/tmp/q$shape
layers=36 extra=()
[[ $shape == 0.6b ]] && layers=28 extra=(--shape=0.6b)
[[ -d $model ]] || record $run python3 .gpu/gpu_wide_parity.py "$model" "$layers" --make-only "${extra[@]}"
[[ -f $model.gguf ]] || record python3 .gpu/gguf_no_vocab.py /tmp/llama "$model" "$model.gguf"
if [[ -n $build ]]; then
  wait "$build" || { echo "llama.cpp build failed" >>"$out/results.txt"; tail -20 /tmp/llama/build.log >>"$out/log.txt"; }
fi
record $run flashroll bench decode --model "$model" --device cuda --batch 1 --context 64 --gen 64 \
  --prefill-tokens 64 --repeats 3 --json
tail_lines=3 record "${llama_env[@]}" /tmp/llama/pack/bin/llama-bench -m "$model.gguf" -ngl 99 -fa 1 -p 64 -n 64 \
  -r 3 -o jsonl
record $run flashroll bench decode --model "$model" --device cuda --batch 64 --context 64 --gen 32 \
  --prefill-tokens 64 --repeats 1 --json
tail_lines=4 record "${llama_env[@]}" /tmp/llama/pack/bin/llama-batched-bench -m "$model.gguf" -ngl 99 -fa on \
  -c 8192 -b 2048 -ub 512 -npp 64 -ntg 32 -npl 1,64
record $run python3 - <<'PY'
import json, torch
a = torch.empty(1 << 31, dtype=torch.bfloat16, device="cuda"); b = torch.empty_like(a); times = []
for _ in range(13):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); b.copy_(a); e.record(); e.synchronize(); times.append(s.elapsed_time(e) / 1e3)
print(json.dumps({"copy_bandwidth_GBps_after": round(2 * a.numel() * 2 / sorted(times[3:])[5] / 1e9, 1)}))
PY
cat "$out/results.txt"
