#!/usr/bin/env bash
# Trains the default models on one GPU in one call. Run on the GPU machine
# from the repository root:
#   [DATA=FILE] [TOKENIZER=DIR] models/train_on_device.sh ARCHS MINUTES BATCH [SEED]
#     ARCHS    "dense", "moe" or "dense moe" (trained side by side on the GPU)
#     DATA     the demonstrations (.gz, .xz or plain JSON lines;
#              default models/data/demos.jsonl.gz)
#     TOKENIZER a directory with tokenizer.json to reuse (e.g. models/default);
#              default: train a new one from DATA
# Writes default.tar and/or default-moe.tar (each a Hugging Face directory plus
# curve.json, parity.json, parity_logits.bin) and train.log under $OUT.
set -euo pipefail
archs=${1:?ARCHS: dense, moe or "dense moe"}
minutes=${2:?MINUTES: the training budget of each model}
batch=${3:?BATCH: windows of 2,048 tokens per step}
seed=${4:-1}
out=${OUT:?set OUT to the directory that receives the results}
data=${DATA:-models/data/demos.jsonl.gz}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

tok=${TOKENIZER:-}
if [ -z "$tok" ]; then
  tok=$work/tok
  python3 models/train.py tokenizer --data "$data" --out "$tok" 2>&1 | tee "$out/train.log"
fi
pids=()
for arch in $archs; do
  name=default; [ "$arch" = moe ] && name=default-moe
  python3 models/train.py train --data "$data" --tokenizer "$tok" --arch "$arch" --out "$work/$name" \
      --minutes "$minutes" --batch "$batch" --seed "$seed" > "$work/$arch.log" 2>&1 &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
for arch in $archs; do
  name=default; [ "$arch" = moe ] && name=default-moe
  cat "$work/$arch.log" >> "$out/train.log"
  [ -d "$work/$name" ] && tar -C "$work" -cf "$out/$name.tar" "$name"
done
exit "$status"
