#!/usr/bin/env bash
# Non-finite values (--check-for-nan-in-loss-and-grad, on by default; --rerun-mode
# validate_results): a diverging --lr, NaN weights given to --init-from, and a NaN gradient
# injected on one rank (every time its iteration is computed, or only the first time) each stop
# the run with the iteration and the parameter named, exit non-zero, and nothing non-finite
# written. Without the check (--no-check-for-nan-in-loss-and-grad) a non-finite iteration is
# skipped: no optimizer step, the weights and moments saved after it equal the ones before
# bitwise. A spiky loss (--check-for-spiky-loss) is reported and training goes on. Optimizer
# post-validation skips and stops alike.
. "$(dirname "$0")/lib.sh"

# The newest save in DIR holds finite values only: `tessel export --load` refuses anything else.
saves_finite() {  # DIR
  "$tessel" export --load "$1" --out "$work/check_export" > "$work/check_export.out" 2>&1 ||
    { cat "$work/check_export.out"; fail "the newest save in $1 is not finite or does not load"; }
}

stopped() {  # NAME TEXT... : the last run exited non-zero, its output holds every TEXT
  local name=$1
  shift
  [ "$rc" -ne 0 ] || { cat "$work/$name.out"; fail "$name: exit 0"; }
  expect_one_report "$work/$name.out"
  for text in "$@"; do expect_text "$work/$name.out" "$text"; done
  echo "ok: $name: $(grep 'tessel: error' "$work/$name.out")"
}

# 1. A learning rate of 10^4 diverges: the run stops at the first non-finite loss or norm, and
# the recomputed iteration says it is reproducible.
timeout 120 "$tessel" train "${sizes[@]}" "${common[@]}" --train-iters 40 --eval-iters 0 --lr 1e4 --lr-warmup-iters 0 \
  --save "$work/lr" --save-interval 1 --save-hf "$work/lr_hf" > "$work/lr.out" 2>&1
rc=$?
stopped lr "not finite (--check-for-nan-in-loss-and-grad)" "first non-finite gradient:" \
  "a reproducible fault" "stopped before the optimizer step"
it=$(grep -o "tessel: error: iteration [0-9]*" "$work/lr.out" | grep -o "[0-9]*$")
[ "$(latest "$work/lr")" -eq $((it - 1)) ] || fail "lr: the last save is not iteration $((it - 1))"
saves_finite "$work/lr"
[ ! -e "$work/lr_hf/model.safetensors" ] || fail "lr: an export was written"

# 2. NaN weights given to --init-from: refused before training, naming the file and tensor.
"$tessel" export --out "$work/init" "${sizes[@]}" > /dev/null || fail "export failed"
/usr/bin/python3 - "$work/init/model.safetensors" <<'EOF'
import json, struct, sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
name = "transformer.h.1.mlp.c_fc.weight"
begin = header[name]["data_offsets"][0]
data[8 + n + begin + 4 * 5:8 + n + begin + 4 * 6] = struct.pack("<f", float("nan"))
open(path, "wb").write(data)
EOF
timeout 60 "${mpirun[@]}" -n 2 "$tessel" train "${model[@]}" --train-iters 3 --eval-iters 0 --tp 2 \
  --init-from "$work/init" --save "$work/init_ckpt" --save-hf "$work/init_hf" > "$work/init.out" 2>&1
rc=$?
stopped init "$work/init" "transformer.h.1.mlp.c_fc.weight holds a non-finite value (nan at element 5"
if grep -q "^iter " "$work/init.out"; then fail "init: it trained"; fi
[ -z "$(find "$work/init_ckpt" "$work/init_hf" -type f 2>/dev/null)" ] || fail "init: files were written"

# 3. A NaN gradient injected on rank 1 of DP2 in iteration 4, every time it is computed: the
# recomputation names rank 1 (before the reduction spreads it) and calls it reproducible.
timeout 60 "${mpirun[@]}" -n 2 "$tessel" train "${model[@]}" --train-iters 8 --eval-iters 0 \
  --inject-fault nan-grad:4:1 --save "$work/inj" --save-interval 1 > "$work/inj.out" 2>&1
rc=$?
stopped inj "iteration 4: loss" "on rank 1 (tp 0, cp 0, pp 0, dp 1), as its backward left it" \
  "a reproducible fault"
[ "$(latest "$work/inj")" -eq 3 ] || fail "inj: the last save is not iteration 3"
saves_finite "$work/inj"

# 4. The same, only the first time: a transient fault.
timeout 60 "${mpirun[@]}" -n 2 "$tessel" train "${model[@]}" --train-iters 8 --eval-iters 0 \
  --inject-fault transient-nan-grad:4:1 > "$work/transient.out" 2>&1
rc=$?
stopped transient "iteration 4: loss" "a transient fault (the machine), not a reproducible one" \
  "after the gradient reduction"

# 5. A loss 1000 times too large after the first 100: reported, recomputed, training goes on.
timeout 120 "$tessel" train --num-layers 1 --hidden-size 32 --num-attention-heads 4 \
  --seq-length 16 "${optim[@]}" "${common[@]}" --train-iters 106 --eval-iters 0 --log-interval 50 --check-for-spiky-loss --inject-fault loss-spike:104 > "$work/spike.out" 2>&1 ||
  { cat "$work/spike.out"; fail "spike: the run failed"; }
expect_text "$work/spike.out" "warning: iteration 104: spiky loss"
expect_text "$work/spike.out" "recomputed alike: reproducible"
expect_text "$work/spike.out" "iter 106/106"
echo "ok: spike: $(grep 'spiky' "$work/spike.out")"
# The same under post-validation stepping before each norm (--clip-grad 0: no step is changed):
# reported when the step is validated, not recomputed.
timeout 120 "$tessel" train --num-layers 1 --hidden-size 32 --num-attention-heads 4 \
  --seq-length 16 "${optim[@]}" "${common[@]}" --train-iters 106 --eval-iters 0 --log-interval 50 --check-for-spiky-loss --inject-fault loss-spike:104 \
  --enable-optimizer-post-validation --clip-grad 0 > "$work/spike_pv.out" 2>&1 ||
  { cat "$work/spike_pv.out"; fail "spike_pv: the run failed"; }
expect_text "$work/spike_pv.out" "warning: iteration 104: spiky loss"
expect_text "$work/spike_pv.out" "not recomputed: post-validation took its step before the loss was known"
expect_text "$work/spike_pv.out" "106 steps taken before their gradient norm and kept"
echo "ok: spike under post-validation: $(grep 'spiky' "$work/spike_pv.out")"

# 6. Without the check, a NaN gradient on rank 1 of DP2 (distributed optimizer) in iteration 2:
# the iteration is skipped (logged), the run goes on to exit 0, and the save after iteration 2
# holds the weights, moments and step count of the save after iteration 1, bitwise.
timeout 60 "${mpirun[@]}" -n 2 "$tessel" train "${model[@]}" --train-iters 3 --eval-iters 0 --use-distributed-optimizer \
  --no-check-for-nan-in-loss-and-grad --inject-fault nan-grad:2:1 --save "$work/skip" --save-interval 1 \
  --log-json "$work/skip.jsonl" > "$work/skip.out" 2>&1 || { cat "$work/skip.out"; fail "skip: the run failed"; }
expect_text "$work/skip.out" "iter 2/3 | loss"
expect_text "$work/skip.out" "skipped: not finite, no optimizer step"
[ "$(grep -c '"skipped":true' "$work/skip.jsonl")" -eq 1 ] || fail "skip: not one skipped record"
grep '"iteration":2,' "$work/skip.jsonl" | grep -q '"skipped":true' || fail "skip: iteration 2 is not the skipped one"
expect_text "$work/skip.out" "iter 3/3"
step_count() { grep -o '"step_count": [0-9]*' "$1/metadata.json"; }
for it in 1 2 3; do iter_dir[$it]=$(printf '%s/skip/iter_%07d' "$work" "$it"); done
[ "$(step_count "${iter_dir[2]}")" = "$(step_count "${iter_dir[1]}")" ] || fail "skip: the step count moved"
for shard in "${iter_dir[1]}"/rank_*.safetensors; do
  cmp -s "$shard" "${iter_dir[2]}/${shard##*/}" || fail "skip: ${shard##*/} changed in the skipped iteration"
done
cmp -s "${iter_dir[2]}/rank_00000.safetensors" "${iter_dir[3]}/rank_00000.safetensors" &&
  fail "skip: iteration 3 took no step either"
saves_finite "$work/skip"
echo "ok: skip: iteration 2 skipped, its save equals iteration 1's bitwise"

# 7. The same under optimizer post-validation (the step taken before the norm is known, then
# validated): without the check, the same skip and the same losses as the plain step's run;
# with it, the run stops at iteration 2 naming it.
timeout 60 "${mpirun[@]}" -n 2 "$tessel" train "${model[@]}" --train-iters 3 --eval-iters 0 --use-distributed-optimizer \
  --no-check-for-nan-in-loss-and-grad --inject-fault nan-grad:2:1 --enable-optimizer-post-validation \
  --log-json "$work/skip_pv.jsonl" > "$work/skip_pv.out" 2>&1 || { cat "$work/skip_pv.out"; fail "skip_pv: the run failed"; }
same_records "$work/skip.jsonl" "$work/skip_pv.jsonl"
timeout 60 "${mpirun[@]}" -n 2 "$tessel" train "${model[@]}" --train-iters 3 --eval-iters 0 --use-distributed-optimizer \
  --inject-fault nan-grad:2:1 --enable-optimizer-post-validation > "$work/stop_pv.out" 2>&1
rc=$?
stopped stop_pv "iteration 2: loss" "not finite (--check-for-nan-in-loss-and-grad"
echo "ok: post-validation: the same skip, and the same stop"
