#!/usr/bin/env bash
# The --save folder deleted under a running job (two ranks): the run stops at its next save with
# one report naming the folder, exits non-zero and does not make the folder again — made again,
# it would hold no lock, and a second run could write its saves into it beside this one's.
. "$(dirname "$0")/lib.sh"
# The first save at iteration 200: long after the folder is deleted, on a loaded machine too.
flags=("${model[@]}" --train-iters 300 --eval-iters 0 --save-interval 200)
ckpt=$work/ckpt

timeout 120 "${mpirun[@]}" -n 2 "$tessel" train "${flags[@]}" --save "$ckpt" \
  --log-json "$work/run.jsonl" > "$work/run.out" 2>&1 &
run=$!
background+=("$run")
wait_for_records "$work/run.jsonl" 3 60 "$run"
rm -rf "$ckpt"
echo "deleted $ckpt under the run"
wait "$run"
rc=$?
cat "$work/run.out"
[ "$rc" -ne 124 ] || fail "the run hung"
[ "$rc" -ne 0 ] || fail "the run exited 0 with its --save folder deleted"
expect_one_report "$work/run.out"
expect_text "$work/run.out" "--save $ckpt: the folder was deleted or replaced while this run held its lock"
[ ! -e "$ckpt" ] || fail "the run made $ckpt again"
[ "$(count_records "$work/run.jsonl")" -lt 201 ] || fail "the run trained past its failed save"
echo "ok: a deleted --save folder stops the run at its next save and is not made again"
