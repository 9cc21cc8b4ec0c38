#!/usr/bin/env bash
# Makes the peer-comparison fixtures: GGUF files written by llama.cpp's own converter
# (convert_hf_to_gguf.py + gguf-py) from the Hugging Face parity fixtures in
# tests/data/parity/, and the 4,096-token long-context fixture
# (scripts/make_long_context_fixture.py). Runs where PyTorch and transformers are
# installed (the GPU machine reached through the `device` tool; all of it runs on the CPU).
#
# Usage: scripts/make_llamacpp_gguf_fixtures.sh OUT_DIR
#   LLAMA_CONVERT  a directory holding llama.cpp's convert_hf_to_gguf.py, conversion/ and
#                  gguf-py/ (default .cache/llama-convert; llama.cpp is never committed here)
#   OUT_DIR/fixtures.tar.gz  parity-llamacpp/*.gguf and parity-long/*, to unpack under tests/data/
#   OUT_DIR/convert.log      the converter's log and a metadata dump of every GGUF
#
# The one change made to the converter's behaviour: the parity fixtures' tiny byte-level
# BPE tokenizer (300 ids, copied into the fixtures that have none) is not one of the
# tokenizers whose pre-tokenizer hash llama.cpp knows, so the converter would stop with
# "BPE pre-tokenizer was not recognized"; a wrapper makes get_vocab_base_pre() answer
# "gpt-2" (the same byte-level regex split). Tensors, names, permutations and
# quantisation are the converter's own.
#
# Getting the converter: cd /tmp && npm pack node-llama-cpp@3.21.1 && tar xzf node-llama-cpp-*.tgz
#   && git clone package/llama/gitRelease.bundle llama.cpp; then copy convert_hf_to_gguf.py,
#   conversion/ and gguf-py/gguf/ (as gguf-py/gguf) into .cache/llama-convert/.
# On the device: run with carry [".cache/llama-convert"], then cp OUT_DIR/* "$OUT"/.
set -euo pipefail

out=${1:?usage: $0 OUT_DIR}
conv=$(realpath "${LLAMA_CONVERT:-.cache/llama-convert}")
repo=$(pwd)
test -f "$conv/convert_hf_to_gguf.py" || { echo "$conv: no convert_hf_to_gguf.py" >&2; exit 2; }
mkdir -p "$out"
out=$(realpath "$out")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/hf" "$work/fixtures/parity-llamacpp"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 CUDA_VISIBLE_DEVICES=

cat >"$work/convert.py" <<'EOF'
# Runs llama.cpp's convert_hf_to_gguf.py with one override (see the script's header).
import runpy
import sys

conv = sys.argv.pop(1)
sys.path.insert(0, conv)
sys.path.insert(1, conv + "/gguf-py")
import conversion.base as base  # noqa: E402

base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
sys.argv[0] = conv + "/convert_hf_to_gguf.py"
runpy.run_path(sys.argv[0], run_name="__main__")
EOF

# fixture:outtype pairs.
jobs=(llama:f32 llama:f16 llama:q8_0 llama3_tied:f32 qwen2:f32 qwen2_moe:f32
      qwen3:f32 qwen3:f16 qwen3_moe:f32 qwen3_moe:q8_0 qwen3_moe_mixed:f32 qwen3_moe_mixed:f16)

for name in llama llama3_tied qwen2 qwen2_moe qwen3 qwen3_moe qwen3_moe_mixed; do
  cp -r "tests/data/parity/$name" "$work/hf/$name"
  rm -f "$work/hf/$name/logits.bin" "$work/hf/$name/reference.json"
  if [ ! -f "$work/hf/$name/tokenizer.json" ]; then
    # The llama fixture's tokenizer, without its eos_token, so the eos id comes from config.json.
    cp tests/data/parity/llama/tokenizer.json "$work/hf/$name/"
    python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); c.pop("eos_token",None); json.dump(c,open(sys.argv[2],"w"),indent=2)' \
      tests/data/parity/llama/tokenizer_config.json "$work/hf/$name/tokenizer_config.json"
  fi
done

convert_one() {
  local name=${1%%:*} type=${1##*:}
  local file="$work/fixtures/parity-llamacpp/$name.$type.gguf"
  if python3 "$work/convert.py" "$conv" "$work/hf/$name" --outtype "$type" --outfile "$file" \
      >"$work/log.$name.$type" 2>&1; then
    echo "== $name $type: ok $(stat -c %s "$file") bytes" >>"$work/log.$name.$type"
  else
    echo "== $name $type: FAILED" >>"$work/log.$name.$type"
    rm -f "$file"
  fi
}
export -f convert_one
export work conv
printf '%s\n' "${jobs[@]}" | xargs -P 6 -I{} bash -c 'convert_one {}'

python3 "$repo/scripts/make_long_context_fixture.py" "$work/fixtures" >"$work/log.long" 2>&1 \
  || echo "== long-context fixture FAILED" >>"$work/log.long" &
long=$!

{
  echo "converter: $(cat "$conv/COMMIT" 2>/dev/null || echo unknown)"
  echo "python $(python3 -c 'import sys,torch,transformers,numpy; print(sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__, "numpy", numpy.__version__)')"
  for j in "${jobs[@]}"; do
    n=${j%%:*} t=${j##*:}
    echo "######## $n $t"
    grep -v "^Writing:" "$work/log.$n.$t" | tail -n 60
  done
  for f in "$work"/fixtures/parity-llamacpp/*.gguf; do
    echo "######## dump $(basename "$f")"
    PYTHONPATH="$conv/gguf-py" python3 "$conv/gguf-py/gguf/scripts/gguf_dump.py" "$f" 2>&1 | grep -v "tokenizer.ggml.\(tokens\|token_type\|merges\)" | head -n 80
  done
} >"$out/convert.log" 2>&1
wait "$long" || true
cat "$work/log.long" >>"$out/convert.log"
tar -C "$work/fixtures" -czf "$out/fixtures.tar.gz" .
ls -l "$work"/fixtures/* >>"$out/convert.log"
grep "^== " "$out/convert.log" || true
