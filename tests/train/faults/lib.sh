# Shared by the fault tests (tests/train/faults/*.sh, ctest label `fault`): each is run as
#   SCRIPT TESSEL SOURCE_DIR MPIRUN...
# and sources this file, which sets $tessel, $src, the mpirun command line in $mpirun (an
# array), a scratch folder $work removed at exit, and the helpers below. Every job runs under
# `timeout`, so a hang fails the test instead of stalling CI.
set -uo pipefail
tessel=$1
src=$2
shift 2
mpirun=("$@")
work=$(mktemp -d)
background=()
cleanup() {
  for pid in "${background[@]}"; do kill -KILL "$pid" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT

# A small model on the bundled corpus, a few milliseconds per iteration: $model, or its parts
# (a flag may be given once) for a test that changes one.
sizes=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32)
# The warmup ends before the decay does, as Megatron's scheduler asserts, in the shortest runs
# here too (2 iterations).
optim=(--lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 1)
common=(--micro-batch-size 2 --global-batch-size 8 --seed 7 --threads 1
        --data-path "$src/data/kjv-genesis-esther.txt")
model=("${sizes[@]}" "${optim[@]}" "${common[@]}" --log-interval 1)

fail() {
  echo "FAIL: $*"
  exit 1
}

# `iteration loss grad_norm` per record of a --log-json file: the values as nlohmann wrote them
# (shortest round-trip form), so equal text is equal bits.
records() {
  sed -E 's/.*"grad_norm":([^,}]*).*"iteration":([0-9]+),.*"loss":([^,}]*).*/\2 \3 \1/' "$1"
}

# Fails unless two --log-json files hold the same iterations with bitwise equal losses and norms.
same_records() {
  records "$1" > "$work/records_a"
  records "$2" > "$work/records_b"
  [ -s "$work/records_a" ] || fail "$1 holds no records"
  if ! cmp -s "$work/records_a" "$work/records_b"; then
    diff "$work/records_a" "$work/records_b" | head -20
    fail "$2 differs from $1"
  fi
  echo "ok: $2 equals $1 bitwise ($(wc -l < "$work/records_a") iterations)"
}

# The number of records in a --log-json file (0 while it does not exist).
count_records() {
  if [ -f "$1" ]; then wc -l < "$1"; else echo 0; fi
}

# Waits (at most SECONDS) until FILE holds N records; fails when PID ended first.
wait_for_records() {  # FILE N SECONDS PID
  local deadline=$((SECONDS + $3))
  while [ "$(count_records "$1")" -lt "$2" ]; do
    kill -0 "$4" 2>/dev/null || fail "the job ended before iteration $2"
    [ $SECONDS -lt $deadline ] || fail "no iteration $2 after $3 s"
    sleep 0.02
  done
}

# Every process under PID (children, theirs, ...).
descendants() {
  local child
  for child in $(pgrep -P "$1"); do
    echo "$child"
    descendants "$child"
  done
}

# The tessel processes (the ranks) under PID.
ranks_under() {
  local p
  for p in $(descendants "$1"); do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = tessel ] && echo "$p"
  done
}

# The iteration DIR/latest_checkpointed_iteration.txt names.
latest() {
  tr -d '[:space:]' < "$1/latest_checkpointed_iteration.txt"
}

# Fails unless FILE contains TEXT.
expect_text() {  # FILE TEXT
  grep -qF -- "$2" "$1" || { cat "$1"; fail "the output lacks \"$2\""; }
}

# Fails unless an error every rank met was reported once, by rank 0, without an MPI_ABORT banner.
expect_one_report() {  # FILE
  local reports
  reports=$(grep -c "tessel: error:" "$1")
  [ "$reports" -eq 1 ] || { cat "$1"; fail "$reports error reports, not 1"; }
  if grep -q "\[rank [0-9]*\] tessel: error" "$1"; then cat "$1"; fail "reported by a rank other than 0"; fi
  if grep -q "MPI_ABORT" "$1"; then cat "$1"; fail "an MPI_ABORT banner"; fi
}

# Runs CMD under `timeout SECONDS`; it must fail cleanly: a non-zero exit that is neither a
# signal nor the time limit, and one "tessel: error:" line, containing TEXT.
expect_refused() {  # SECONDS TEXT CMD...
  local limit=$1 text=$2
  shift 2
  timeout "$limit" "$@" > "$work/refused.out" 2>&1
  local rc=$?
  [ "$rc" -ne 0 ] || { cat "$work/refused.out"; fail "exit 0: $*"; }
  [ "$rc" -lt 124 ] || { cat "$work/refused.out"; fail "exit $rc (a signal or the time limit): $*"; }
  local reports
  reports=$(grep -c "tessel: error:" "$work/refused.out")
  [ "$reports" -eq 1 ] || { cat "$work/refused.out"; fail "$reports error lines, not 1: $*"; }
  grep "tessel: error:" "$work/refused.out" | grep -qF -- "$text" ||
    { cat "$work/refused.out"; fail "the error lacks \"$text\": $*"; }
  echo "ok: $(grep "tessel: error:" "$work/refused.out" | cut -c1-240)"
}

# Runs CMD... with a tmpfs of SIZE KiB mounted on DIR (in a private mount namespace, which needs
# root, as CI runs), then copies what DIR holds to DIR.kept; returns CMD's status (99: no tmpfs).
# CMD runs in the namespace: a `bash -c` puts files on the small disk before a job.
on_small_disk() {  # SIZE_KIB DIR CMD...
  local size=$1 dir=$2
  shift 2
  mkdir -p "$dir"
  timeout 120 unshare --mount --propagation private bash -c '
    mount -t tmpfs -o size='"$size"'k tmpfs "$0" || exit 99
    "$@"
    rc=$?
    cp -a "$0" "$0.kept"
    exit $rc' "$dir" "$@"
}

# Fails unless a run (exit status RC, output in FILE) was stopped by a full disk, reported once
# with TEXT.
expect_full_disk() {  # RC FILE TEXT
  cat "$2"
  [ "$1" -ne 99 ] || fail "cannot mount a tmpfs (the test needs root, as CI runs it)"
  [ "$1" -ne 0 ] || fail "the run on a full disk exited 0"
  expect_one_report "$2"
  expect_text "$2" "No space left on device"
  expect_text "$2" "$3"
}
