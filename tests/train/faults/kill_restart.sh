#!/usr/bin/env bash
# kill -9 of one rank at a random moment of a run that saves every 3 iterations (DP2 with the
# distributed optimizer and background saves, validation every 5 iterations), then
# scripts/train-with-restarts.sh: the finished run's training and validation losses equal an
# uninterrupted run's bitwise, and every restart resumed from a committed save.
. "$(dirname "$0")/lib.sh"
flags=("${model[@]}" --train-iters 90 --use-distributed-optimizer --eval-interval 5 --eval-iters 1)

timeout 120 "${mpirun[@]}" -n 2 "$tessel" train "${flags[@]}" --log-json "$work/straight.jsonl" \
  > "$work/straight.out" 2>&1 || { cat "$work/straight.out"; fail "the uninterrupted run failed"; }

ckpt=$work/ckpt
# Records (iterations and evaluations), plus up to 30 ms: anywhere in the first quarter, in a save
# or not, with the rest of the run left to outlast the time the kill itself takes.
kill_after=$((RANDOM % 20 + 2))
pause=$(printf '0.%03d' $((RANDOM % 30)))
echo "killing a rank after $kill_after iterations and $pause s"
timeout 180 "$src/scripts/train-with-restarts.sh" --max-restarts 2 --restart-delay 0 -- \
  "${mpirun[@]}" -n 2 "$tessel" train "${flags[@]}" --save "$ckpt" --load "$ckpt" --save-interval 3 \
  --async-save --log-json "$work/restarted.jsonl" > "$work/restarted.out" 2>&1 &
launcher=$!
background+=("$launcher")
wait_for_records "$work/restarted.jsonl" "$kill_after" 60 "$launcher"
sleep "$pause"
victim=$(ranks_under "$launcher" | shuf -n 1)
[ -n "$victim" ] || fail "no rank to kill"
kill -KILL "$victim"
echo "killed rank process $victim"
wait "$launcher"
rc=$?
cat "$work/restarted.out"
[ "$rc" -eq 0 ] || fail "the restarted job exited with $rc"
expect_text "$work/restarted.out" "restart 1 of 2"
same_records "$work/straight.jsonl" "$work/restarted.jsonl"

# Each resume loaded a committed save: a multiple of the interval with its metadata.json.
mapfile -t resumes < <(grep -o "resumed from [^ ]* after iteration [0-9]*" "$work/restarted.out")
[ ${#resumes[@]} -gt 0 ] || [ "$kill_after" -lt 7 ] || fail "no restart resumed from a save"
for line in "${resumes[@]}"; do
  it=${line##* }
  [ $((it % 3)) -eq 0 ] || fail "resumed from iteration $it, not a save iteration"
  meta=$(printf '%s/iter_%07d/metadata.json' "$ckpt" "$it")
  [ -f "$meta" ] || fail "resumed from iteration $it, which has no $meta"
  "$tessel" checkpoint verify "$ckpt" --iteration "$it" || fail "the save of iteration $it does not verify"
done
echo "ok: the killed job finished with the uninterrupted run's losses"
