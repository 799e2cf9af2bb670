#!/usr/bin/env bash
# Hostile saves, one process each (issue 26): copies of a save damaged one way each — Adam moments
# that are not finite or negative, a negative or huge step count, a wrong shape, slices that do
# not cover a tensor, NaN weights under a matching CRC, metadata.json lacking a field or being a
# folder, a tracker with trailing garbage, files moved into another iteration's folder — are
# refused by --load and `checkpoint verify` alike, and a kept learning-rate schedule Megatron's
# scheduler would not take by --load, in one line naming the file and the field, with a non-zero
# exit and no signal.
. "$(dirname "$0")/lib.sh"
edit=$src/tests/train/faults/edit_save.py
one=("${model[@]}" --train-iters 2)

# A save, then copies of it damaged one way each: --load and `checkpoint verify` refuse them alike.
timeout 60 "$tessel" train "${one[@]}" --save "$work/save" > "$work/save.out" 2>&1 ||
  { cat "$work/save.out"; fail "the save run failed"; }
"$tessel" checkpoint verify "$work/save" || fail "the pristine save does not verify"
damaged() {  # NAME TEXT EDIT...: a copy of the save edited by edit_save.py EDIT (paths relative to it)
  local name=$1 text=$2
  shift 2
  local copy=$work/$name
  rm -rf "$copy"
  cp -r "$work/save" "$copy"
  local it=$copy/iter_0000002
  (cd "$it" && python3 "$edit" "$@") || fail "$name: cannot damage the save"
  expect_refused 60 "$text" "$tessel" checkpoint verify "$copy"
  expect_refused 60 "$text" "$tessel" train "${model[@]}" --train-iters 4 --eval-iters 0 \
    --override-opt_param-scheduler --load "$copy"  # a longer run: another decay, said to be meant
}
wte=transformer.wte.weight
damaged negative_moment "Adam's second moment" value rank_00000.safetensors "optim.exp_avg_sq/$wte" 7 -1 metadata.json
damaged nan_moment "Adam's first moment" value rank_00000.safetensors "optim.exp_avg/$wte" 7 nan metadata.json
damaged nan_weight "nan at element 7" value rank_00000.safetensors "$wte" 7 nan metadata.json
damaged negative_steps "step_count -1" key metadata.json step_count -1
damaged huge_steps "step_count 1.1805916207174113e+21 is not a whole number" key metadata.json step_count 1180591620717411303424
damaged wrong_shape "has shape [2048, 32]" key metadata.json "tensors.$wte.shape" "[2048, 32]"
damaged uncovered "do not cover" key metadata.json "tensors.$wte.shards" "[]"
for key in files tensors run_config; do
  damaged "no_$key" "no \"$key\"" key metadata.json "$key" --delete
done
# A save's files copied into another iteration's folder: the tracker's iteration with another's weights.
damaged moved "a save of iteration 7 in the folder of iteration 2" key metadata.json iteration 7
# A learning-rate schedule kept from the save is held to Megatron's assertions (0 ≤ warmup <
# decay): a negative warmup trained at lr 0 without a word.
for warmup in -5 20; do
  damaged_copy=$work/warmup_$warmup
  rm -rf "$damaged_copy" && cp -r "$work/save" "$damaged_copy"
  (cd "$damaged_copy/iter_0000002" && python3 "$edit" key metadata.json run_config.opt_param_scheduler.lr_warmup_steps "$warmup") ||
    fail "cannot damage the save's schedule"
  expect_refused 60 "lr_warmup_steps $warmup is not within [0, lr_decay_steps 16)" "$tessel" train "${model[@]}" \
    --train-iters 4 --eval-iters 0 --use-checkpoint-opt_param-scheduler --load "$damaged_copy"
done
# A folder where metadata.json or a model file belongs.
rm -rf "$work/folder_meta" && cp -r "$work/save" "$work/folder_meta"
rm "$work/folder_meta/iter_0000002/metadata.json" && mkdir "$work/folder_meta/iter_0000002/metadata.json"
expect_refused 60 "metadata.json: not a file" "$tessel" checkpoint verify "$work/folder_meta"
expect_refused 60 "metadata.json: not a file" "$tessel" train "${one[@]}" --load "$work/folder_meta"
expect_refused 60 "(a folder)" "$tessel" train "${one[@]}" --model-config "$work"
# A tracker with trailing garbage names no iteration.
rm -rf "$work/tracker" && cp -r "$work/save" "$work/tracker" && echo 2abc > "$work/tracker/latest_checkpointed_iteration.txt"
expect_refused 60 "not an iteration number ('2abc')" "$tessel" checkpoint verify "$work/tracker"
echo "ok: every damaged save is refused by --load and checkpoint verify alike"
