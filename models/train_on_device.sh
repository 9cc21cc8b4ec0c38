#!/usr/bin/env bash
# Trains both default models on one GPU in one call (run on the GPU machine
# from the repository root, with models/data/demos.jsonl.gz present):
#   models/train_on_device.sh [MINUTES] [SEED]
# Writes default.tar and default-moe.tar (each a Hugging Face directory plus
# curve.json, parity.json, parity_logits.bin) and train.log under $OUT.
set -euo pipefail
minutes=${1:-6.3}
seed=${2:-1}
out=${OUT:?set OUT to the directory that receives the results}
data=models/data/demos.jsonl.gz
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

python3 models/train.py tokenizer --data "$data" --out "$work/tok" 2>&1 | tee "$out/train.log"
for arch in dense moe; do
  name=default; [ "$arch" = moe ] && name=default-moe
  python3 models/train.py train --data "$data" --tokenizer "$work/tok" --arch "$arch" \
      --out "$work/$name" --minutes "$minutes" --seed "$seed" > "$work/$arch.log" 2>&1 &
done
status=0
wait %1 || status=$?
wait %2 || status=$?
cat "$work/dense.log" "$work/moe.log" >> "$out/train.log"
for name in default default-moe; do
  [ -d "$work/$name" ] && tar -C "$work" -cf "$out/$name.tar" "$name"
done
exit "$status"
