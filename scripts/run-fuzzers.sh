#!/usr/bin/env bash
# Builds the libFuzzer harnesses in fuzz/ with clang++ into build-fuzz/ and
# runs each one for a fixed time (FUZZ_SECONDS, default 20) from its seeds:
# the small hand-made inputs in fuzz/corpus/<name>/ plus real files from
# tests/data/. New inputs found are kept in build-fuzz/corpus/<name>/; a
# crashing input is written to build-fuzz/artifacts/.
#
# Prints one line per harness with its exec count. Exits 1 when a harness
# crashes, hangs, leaks or trips a sanitizer (the end of its output, with
# the report, is printed), and when the build fails.
#
#   scripts/run-fuzzers.sh                    # all harnesses, 20 s each
#   FUZZ_SECONDS=120 scripts/run-fuzzers.sh gguf_fuzz
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${FUZZ_SECONDS:-20}
build="build-fuzz"
harnesses=("$@")
if [[ ${#harnesses[@]} -eq 0 ]]; then
  harnesses=(safetensors_fuzz hf_config_fuzz gguf_fuzz tokenizer_json_fuzz)
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! { cmake -S fuzz -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ &&
       cmake --build "$build" -j2; } >"$log" 2>&1; then
  cat "$log"
  echo "run-fuzzers: building fuzz/ failed" >&2
  exit 1
fi

# Seed directory for a harness: libFuzzer reads corpus directories, so real
# files from tests/data are linked into one.
seed_dir() {
  local name=$1 dir=$build/seeds/$1
  rm -rf "$dir"
  mkdir -p "$dir"
  case $name in
    safetensors_fuzz)
      ln -s "$PWD"/fuzz/corpus/safetensors/* "$dir"/
      ln -s "$PWD"/tests/data/parity/llama/model-00004-of-00004.safetensors "$dir"/ ;;
    hf_config_fuzz)
      for f in tests/data/parity/*/config.json tests/data/parity/*/generation_config.json; do
        ln -s "$PWD/$f" "$dir/$(basename "$(dirname "$f")")-$(basename "$f")"
      done ;;
    gguf_fuzz)
      ln -s "$PWD"/fuzz/corpus/gguf/* "$dir"/ ;;
    tokenizer_json_fuzz)
      ln -s "$PWD"/tests/data/parity/llama/tokenizer.json "$dir"/ ;;
  esac
  echo "$dir"
}

max_len() {
  case $1 in
    safetensors_fuzz) echo 131072 ;;
    *) echo 65536 ;;
  esac
}

failed=0
mkdir -p "$build/artifacts"
for h in "${harnesses[@]}"; do
  corpus=$build/corpus/$h
  mkdir -p "$corpus"
  seeds=$(seed_dir "$h")
  # The JSON harnesses get a dictionary of JSON syntax and the keys we read.
  extra=()
  [[ $h == gguf_fuzz ]] || extra=(-dict=fuzz/json.dict)
  # -timeout: one input running this long is reported as a hang.
  if "$build/$h" -max_total_time="$seconds" -max_len="$(max_len "$h")" -timeout=25 \
       -rss_limit_mb=2048 -print_final_stats=1 "${extra[@]}" \
       -artifact_prefix="$build/artifacts/$h-" "$corpus" "$seeds" >"$log" 2>&1; then
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    echo "$h: ok, ${execs:-?} execs in ${seconds}s, corpus $(find "$corpus" -type f | wc -l) inputs"
  else
    # The sanitizer report and the crashing input's name are at the end.
    grep -v -e '^#[0-9]' -e 'NEW_FUNC' "$log" | tail -n 80
    echo "$h: FAILED (crashing input in $build/artifacts/)"
    failed=1
  fi
done
exit $failed
