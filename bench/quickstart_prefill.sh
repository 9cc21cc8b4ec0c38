#!/bin/sh
# The quickstart cut to STEPS trainer steps (default 3) and no evaluation,
# run twice side by side from the same seeds: each turn a new engine request
# with the whole conversation (model.sessions: false, the path before
# sessions) and each episode one engine session (the default). Prints each
# run's prefill_tokens, reprefill_tokens and trained_tokens (flashroll run
# --json; docs/BENCHMARKS.md, "Prefill across turns and swaps").
# Usage: bench/quickstart_prefill.sh [STEPS]   (from the repository root, after a build)
set -eu
steps=${1:-3}
mkdir -p runs
for mode in turns sessions; do
  name=qs-prefill-$mode
  rm -rf runs/$name.db* runs/$name-*
  (umask 077 && head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' > runs/$name.token)
  sessions=true
  [ $mode = turns ] && sessions=false
  sed -e "s/^name: quickstart\$/name: $name/" \
      -e "s|^store: runs/quickstart.db\$|store: runs/$name.db|" \
      -e "s|^  threads: 2\$|  threads: 2\n  sessions: $sessions|" \
      -e "s/^  steps: 20\$/  steps: $steps/" \
      -e "s/^  eval_tasks: 128\$/  eval_tasks: 0/" \
      -e "s|^  token_file: runs/quickstart.token\$|  token_file: runs/$name.token|" \
      configs/quickstart.yaml > runs/$name.yaml
  ./build/flashroll run runs/$name.yaml --json > runs/$name.json 2> runs/$name.log &
done
wait
for mode in turns sessions; do
  # The summary follows the "job: N" line.
  python3 -c "import json, sys; t = open(sys.argv[1]).read(); j = json.loads(t[t.index('{'):]); print(sys.argv[2], {k: j[k] for k in ('status', 'samples_done', 'prefill_tokens', 'reprefill_tokens', 'trained_tokens', 'weight_version', 'wall_seconds')})" runs/qs-prefill-$mode.json $mode
done
