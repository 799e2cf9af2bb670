#!/bin/bash
# The data loader's cost per training iteration as a fraction of the step, on the main job's
# pipeline: a byte-level BPE tokenizer (2048 tokens) trained on the bundled corpus, the corpus
# preprocessed to .bin/.idx, then `tessel train --profile-report` of the default model, one process and
# the main job's TP 2 × PP 2 × DP 2 on 8 ranks, alternating. --profile-report reports (iterations 2 on)
# the time the trainer waited for its batch (the loader reads the next one on its own thread
# while this one trains) and the time that thread took to read one batch, both as a share of the
# step measured in the same run.
#
#   bench/loader_bench.sh [--rounds R] [--iters N]
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tessel=${TESSEL:-$root/build/tessel}
rounds=3 iters=20
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    *) echo "usage: loader_bench.sh [--rounds R] [--iters N]" >&2; exit 2 ;;
  esac
done
[ -x "$tessel" ] || { echo "loader_bench.sh: $tessel not found (build first)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
corpus=$root/data/kjv-genesis-esther.txt
"$tessel" tokenizer train --input "$corpus" --vocab-size 2048 --model-type byte-bpe --output "$work/tok" >/dev/null
tokenizer=(--tokenizer-type HuggingFaceTokenizer --tokenizer-model "$work/tok")
"$tessel" preprocess --input "$corpus" --output-prefix "$work/kjv" --append-eod "${tokenizer[@]}" >/dev/null
train=(train "${tokenizer[@]}" --data-path "$work/kjv_text_document" --global-batch-size 32 --train-iters "$iters" --eval-iters 0
       --profile-report)

load() { cut -d' ' -f1-3 /proc/loadavg; }
# "waited W ms per iteration, X% of the S ms step; reading a batch took R ms on its thread (Y%)"
parse() { sed -nE 's/.*waited ([0-9.]+) ms per iteration, ([0-9.]+)% of the ([0-9.]+) ms step; reading a batch took ([0-9.]+) ms on its thread \(([0-9.]+)%\).*/\1 \2 \3 \4 \5/p'; }

echo "# $(lscpu | sed -nE 's/^Model name: +//p') | load $(load) | $iters iterations, profiled from the 2nd"
printf '%-10s %-6s %12s %9s %10s %12s %9s\n' layout round wait_ms wait_% step_ms read_ms read_%
for r in $(seq 1 "$rounds"); do
  line=$(OMP_NUM_THREADS=2 "$tessel" "${train[@]}" --threads 2 2>&1 | parse)
  printf '%-10s %-6s %12s %9s %10s %12s %9s\n' single "$r" $line
  line=$(mpirun --allow-run-as-root --oversubscribe -n 8 -x OMP_NUM_THREADS=1 \
    "$tessel" "${train[@]}" --tp 2 --pp 2 --micro-batch-size 4 2>&1 | parse)
  printf '%-10s %-6s %12s %9s %10s %12s %9s\n' tp2pp2dp2 "$r" $line
done
echo "# load at the end $(load)"
