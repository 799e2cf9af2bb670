#!/usr/bin/env bash
# --log-straggler: with three of four layers on pipeline stage 0, rank 0 computes the longest
# and is named the slowest; the report comes every --log-interval iterations.
. "$(dirname "$0")/lib.sh"
timeout 120 "${mpirun[@]}" -n 2 "$tessel" train --num-layers 4 --hidden-size 32 \
  --num-attention-heads 4 --seq-length 32 "${optim[@]}" "${common[@]}" --train-iters 8 --eval-iters 0 \
  --pp 2 --decoder-first-pipeline-num-layers 3 --log-interval 4 --log-straggler \
  > "$work/run.out" 2>&1 || { cat "$work/run.out"; fail "the run failed"; }
cat "$work/run.out"
[ "$(grep -c '^straggler: iterations' "$work/run.out")" -eq 2 ] || fail "not one report per 4 iterations"
expect_text "$work/run.out" "straggler: iterations 5-8"
grep -q "slowest rank 0 " "$work/run.out" || fail "rank 0 (three layers) is not named the slowest"
echo "ok: $(grep '^straggler: iterations 5-8' "$work/run.out")"
