#!/usr/bin/env bash
# SIGTERM mid-run with --exit-signal-handler: the ranks finish the iteration, save it, commit,
# and the resumed run continues bitwise. Twice: sent to scripts/train-with-restarts.sh (which
# passes it on as SIGUSR1, and the job and the script exit 0), and sent to mpirun itself (Open
# MPI sends the ranks SIGTERM one second later — odls_base_sigkill_timeout — and kills them a
# second after that; mpirun then exits 1 whatever they did, so only the save is checked). And
# --exit-duration-in-mins, which saves and exits 0 the same way. While it kills its ranks,
# mpirun stops relaying their output: a rank printing a line per iteration fills the pipe and
# blocks in the write, so the interrupted ranks write their output to files of their own.
. "$(dirname "$0")/lib.sh"
# Long enough (about a millisecond an iteration) that the run is still going when mpirun passes
# the signal on a second after it got it.
iters=3000
flags=(--num-layers 1 --hidden-size 32 --num-attention-heads 4 --seq-length 16 "${optim[@]}"
       "${common[@]}" --log-interval 1 --train-iters "$iters" --tp 2 --sequence-parallel)

timeout 120 "${mpirun[@]}" -n 2 "$tessel" train "${flags[@]}" --log-json "$work/straight.jsonl" \
  > "$work/straight.out" 2>&1 || { cat "$work/straight.out"; fail "the uninterrupted run failed"; }

# Runs the job (under LAUNCHER, if any) in the background, sends SIGTERM after a few iterations,
# waits for it, checks the save of the last logged iteration and resumes from it. Returns the
# job's exit code.
interrupt_and_resume() {  # NAME LAUNCHER...
  local name=$1
  shift
  local ckpt=$work/$name
  timeout 120 "$@" "${mpirun[@]}" -n 2 bash -c 'exec "$@" > "$0.rank$OMPI_COMM_WORLD_RANK" 2>&1' \
    "$work/$name.out" "$tessel" train "${flags[@]}" --exit-signal-handler \
    --save "$ckpt" --load "$ckpt" --log-json "$work/$name.jsonl" > "$work/$name.out" 2>&1 &
  local pid=$!
  background+=("$pid")
  wait_for_records "$work/$name.jsonl" $((RANDOM % 20 + 5)) 60 "$pid"
  kill -TERM "$(pgrep -P "$pid")"  # timeout's child: the launcher, or mpirun
  wait "$pid"
  local rc=$?
  cat "$work/$name.out" "$work/$name.out.rank0" | grep -v "^iter"
  local saved last
  saved=$(latest "$ckpt") || fail "$name: no save committed"
  last=$(records "$work/$name.jsonl" | tail -1 | cut -d' ' -f1)
  [ "$saved" = "$last" ] || fail "$name: the save is of iteration $saved, the run stopped after $last"
  [ "$saved" -lt "$iters" ] || fail "$name: the run was not interrupted"
  echo "ok: $name: exit $rc, saved iteration $saved, the one it stopped after"
  "$tessel" checkpoint verify "$ckpt" || fail "$name: the save does not verify"
  timeout 120 "${mpirun[@]}" -n 2 "$tessel" train "${flags[@]}" --load "$ckpt" \
    --log-json "$work/$name.jsonl" > "$work/$name.resumed.out" 2>&1 ||
    { cat "$work/$name.resumed.out"; fail "$name: the resumed run failed"; }
  same_records "$work/straight.jsonl" "$work/$name.jsonl"
  return "$rc"
}

interrupt_and_resume launcher "$src/scripts/train-with-restarts.sh" --
rc=$?
[ "$rc" -eq 0 ] || fail "launcher: exited with $rc after SIGTERM"
expect_text "$work/launcher.out.rank0" "SIGUSR1: stopped after iteration"
interrupt_and_resume mpirun
echo "ok: mpirun exited with $? (Open MPI's own code for a job it was told to stop)"

# --exit-duration-in-mins: the same save and exit 0, after 0.02 minutes.
timeout 120 "${mpirun[@]}" -n 2 "$tessel" train "${flags[@]}" --exit-duration-in-mins 0.02 \
  --save "$work/timed" > "$work/timed.out" 2>&1 || { cat "$work/timed.out"; fail "timed: exit non-zero"; }
expect_text "$work/timed.out" "--exit-duration-in-mins 0.02: stopped after iteration $(latest "$work/timed"), saved"
echo "ok: timed: $(grep 'exit-duration' "$work/timed.out")"
