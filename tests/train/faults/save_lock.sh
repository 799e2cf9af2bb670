#!/usr/bin/env bash
# One writer per --save folder: a run (two ranks) holds the folder's lock; a second run on the
# same folder — a relaunch while the first still runs — is refused before its first iteration,
# once, naming the holder, and the folder's saves stay whole. The first run is frozen (SIGSTOP)
# while the second tries, then killed holding the lock: the next launch takes the stale lock over,
# removes what unfinished saves left, and resumes to the uninterrupted run's losses bitwise.
. "$(dirname "$0")/lib.sh"
# long enough that the first run is still training when it is frozen, on a quiet machine too
flags=("${model[@]}" --train-iters 300 --eval-iters 0 --save-interval 5)
ckpt=$work/ckpt

timeout 120 "${mpirun[@]}" -n 2 "$tessel" train "${flags[@]}" --log-json "$work/straight.jsonl" \
  > "$work/straight.out" 2>&1 || { cat "$work/straight.out"; fail "the uninterrupted run failed"; }

timeout 120 "${mpirun[@]}" -n 2 "$tessel" train "${flags[@]}" --save "$ckpt" \
  --log-json "$work/first.jsonl" > "$work/first.out" 2>&1 &
first=$!
background+=("$first")
wait_for_records "$work/first.jsonl" 7 60 "$first"  # the save of iteration 5 is committed
mapfile -t ranks < <(ranks_under "$first")
[ ${#ranks[@]} -eq 2 ] || fail "the first run has ${#ranks[@]} ranks, not 2"
kill -STOP "${ranks[@]}"
echo "froze the first run (ranks ${ranks[*]}) holding the lock"
good=$(latest "$ckpt")

timeout 120 "${mpirun[@]}" -n 2 "$tessel" train "${flags[@]}" --save "$ckpt" \
  --log-json "$work/second.jsonl" > "$work/second.out" 2>&1
rc=$?
cat "$work/second.out"
[ "$rc" -ne 0 ] || fail "the second run on the folder exited 0"
expect_one_report "$work/second.out"
expect_text "$work/second.out" "--save $ckpt: another run is writing this folder"
holder=$(grep -o "pid [0-9]* on host" "$work/second.out" | cut -d' ' -f2)
printf '%s\n' "${ranks[@]}" | grep -qx "$holder" || fail "the message names pid $holder, not a rank of the first run"
[ "$(count_records "$work/second.jsonl")" -eq 0 ] || fail "the second run logged iterations"
grep -q "^iter " "$work/second.out" && fail "the second run trained"
[ "$(latest "$ckpt")" = "$good" ] || fail "the tracker moved while the first run was frozen"
"$tessel" checkpoint verify "$ckpt" || fail "the first run's save does not verify after the second"
echo "ok: the second run was refused before iteration 1"

kill -KILL "${ranks[@]}"
wait "$first"
echo "killed the first run holding the lock (latest save: iteration $good)"
# What a save killed mid-write leaves behind.
iter_dir=$(printf '%s/iter_%07d' "$ckpt" "$good")
leftovers=("$ckpt/latest_checkpointed_iteration.txt.tmp4242" "$iter_dir/metadata.json.tmp"
           "$iter_dir/rank_00001.safetensors.tmp4242")
for f in "${leftovers[@]}"; do echo partial > "$f"; done

timeout 120 "${mpirun[@]}" -n 2 "$tessel" train "${flags[@]}" --save "$ckpt" --load "$ckpt" \
  --log-json "$work/first.jsonl" > "$work/resumed.out" 2>&1 ||
  { cat "$work/resumed.out"; fail "the launch after the kill failed"; }
cat "$work/resumed.out"
expect_text "$work/resumed.out" "took over the lock of a run that ended without releasing it (pid"
expect_text "$work/resumed.out" "resumed from $ckpt after iteration $good"
for f in "${leftovers[@]}"; do [ ! -e "$f" ] || fail "$f is left"; done
same_records "$work/straight.jsonl" "$work/first.jsonl"
"$tessel" checkpoint verify "$ckpt" || fail "the resumed run's last save does not verify"
# A run that ends releases the lock: the next one finds nothing stale.
timeout 120 "${mpirun[@]}" -n 2 "$tessel" train "${flags[@]}" --save "$ckpt" --load "$ckpt" \
  > "$work/again.out" 2>&1 || { cat "$work/again.out"; fail "the launch after a finished run failed"; }
grep -q "took over the lock" "$work/again.out" && fail "a finished run left its lock stale"
echo "ok: a killed run's lock is taken over and its save resumed bitwise"
