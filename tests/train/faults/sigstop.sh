#!/usr/bin/env bash
# SIGSTOP of one rank with --distributed-timeout-seconds 3: the other waits without burning its
# core, and after 3 s ends the job with a message naming the operation and the group it waited
# in; the job is over within the timeout + 10 s. The run validates after every iteration, over
# more batches than it trains on, so the stop lands in evaluation most of the time: its forwards
# wait through the same collectives.
. "$(dirname "$0")/lib.sh"
timeout 60 "${mpirun[@]}" -n 2 "$tessel" train "${model[@]}" --train-iters 1000 --tp 2 \
  --eval-interval 1 --eval-iters 10 \
  --distributed-timeout-seconds 3 --log-json "$work/run.jsonl" > "$work/run.out" 2>&1 &
job=$!
background+=("$job")
wait_for_records "$work/run.jsonl" 3 60 "$job"
mapfile -t ranks < <(ranks_under "$job" | sort -n)
[ ${#ranks[@]} -eq 2 ] || fail "expected 2 ranks, found ${ranks[*]}"
stopped=${ranks[1]} waiting=${ranks[0]}
background+=("$stopped")
kill -STOP "$stopped"
start=$SECONDS
# CPU time (user + system, in clock ticks) of the waiting rank over 1.5 s of its wait.
sleep 0.5
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
before=$(ticks "$waiting")
sleep 1.5
after=$(ticks "$waiting")
hz=$(getconf CLK_TCK)
wait "$job"
rc=$?
elapsed=$((SECONDS - start))
cat "$work/run.out"
kill -KILL "$stopped" 2>/dev/null
[ "$rc" -ne 0 ] || fail "the job exited 0"
[ "$rc" -ne 124 ] || fail "the job was still running after 60 s"
[ "$elapsed" -le 13 ] || fail "the job ended $elapsed s after the SIGSTOP, not within 3 + 10 s"
expect_text "$work/run.out" "distributed timeout: rank 0 waited 3 s in"
# Most stops land in a forward's all-reduce over TP; one that lands where all ranks agree (the
# numerics check, the exit signals, reading an evaluation batch) waits over the world, the same
# two ranks: more often on a loaded machine.
grep -qE "over group (tp|world) \(world ranks 0, 1\)" "$work/run.out" ||
  fail "the output lacks \"over group tp (world ranks 0, 1)\" or the same over group world"
used=$(( (after - before) * 100 / hz ))  # centiseconds of CPU in 150 of waiting
echo "the waiting rank used $used cs of CPU in 150 cs"
[ "$used" -le 30 ] || fail "the waiting rank burnt its core ($used cs of CPU in 150 cs)"
echo "ok: the job ended $elapsed s after the SIGSTOP: $(grep -o 'distributed timeout.*' "$work/run.out" | head -1)"
