#!/usr/bin/env bash
# One GPU lease's measurements for docs/BENCHMARKS.md (issue 24), run on the
# GPU machine from the repository root after scripts/device-run.sh staged
# .gpu/: the GPU tests, the copy bandwidth, `bench decode` on random
# Qwen3-8B and Qwen3-0.6B shapes at batch 1 and 64, and 8B-width parity.
# Each result is appended to $OUT/results.txt (one line of JSON per run,
# after a '# command' line); logs go to $OUT/log.txt.
#   bash .gpu/gpu_bench_all.sh [tests] [8b] [0.6b] [parity]   (default: all)
set -uo pipefail
out="${OUT:-/tmp/out}"
mkdir -p "$out"
steps=("$@")
[[ ${#steps[@]} -eq 0 ]] && steps=(tests 8b 0.6b parity)
run="bash .gpu/run.sh"
record() {
  echo "# $*" >>"$out/results.txt"
  $run "$@" 2>>"$out/log.txt" | tail -1 >>"$out/results.txt"
}
for step in "${steps[@]}"; do
  case "$step" in
    tests)
      $run cuda_tests 2>&1 | tee "$out/cuda_tests.txt" | grep -E "^\[  (PASSED|FAILED) |FAILED|OK \]" ;;
    8b)
      record python3 .gpu/gpu_wide_parity.py /tmp/q8b 36 --make-only
      record flashroll bench decode --model /tmp/q8b --device cuda --batch 1 --context 64 --gen 64 \
        --prefill-tokens 64 --repeats 3 --json
      record flashroll bench decode --model /tmp/q8b --device cuda --batch 64 --context 64 --gen 32 \
        --prefill-tokens 64 --repeats 1 --json
      rm -rf /tmp/q8b ;;
    0.6b)
      record python3 .gpu/gpu_wide_parity.py /tmp/q06b 28 --make-only --shape=0.6b
      record flashroll bench decode --model /tmp/q06b --device cuda --batch 1 --context 64 --gen 64 \
        --prefill-tokens 64 --repeats 3 --json
      record flashroll bench decode --model /tmp/q06b --device cuda --batch 64 --context 64 --gen 32 \
        --prefill-tokens 64 --repeats 1 --json ;;
    parity)
      record python3 .gpu/gpu_wide_parity.py /tmp/wide 2 ;;
    *) echo "unknown step $step" >&2; exit 2 ;;
  esac
done
cat "$out/results.txt"
