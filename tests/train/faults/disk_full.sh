#!/usr/bin/env bash
# A full disk during a save: --save on a small tmpfs (mounted in a private mount namespace, which
# needs root, as CI runs) with room for two saves and a half. The run stops in the iteration of
# the save that does not fit (a background save: at the first iteration after its writer failed,
# before the next save) naming the file and the error; `latest` still names the last good save,
# which verifies and resumes bitwise.
. "$(dirname "$0")/lib.sh"
base=("${model[@]}" --tp 2)
flags=("${base[@]}" --train-iters 16)

timeout 120 "${mpirun[@]}" -n 2 "$tessel" train "${flags[@]}" --log-json "$work/straight.jsonl" \
  > "$work/straight.out" 2>&1 || { cat "$work/straight.out"; fail "the uninterrupted run failed"; }
# The size of one save, measured.
timeout 120 "${mpirun[@]}" -n 2 "$tessel" train "${base[@]}" --train-iters 2 --eval-iters 0 --save "$work/one" \
  > "$work/one.out" 2>&1 || { cat "$work/one.out"; fail "the one-save run failed"; }
save_kib=$(du -sk "$work/one/iter_0000002" | cut -f1)
size_kib=$((save_kib * 5 / 2 + 8))
echo "one save takes $save_kib KiB; the tmpfs has $size_kib KiB"

# Trains on the small disk, saving every 3 iterations; sets $last (the last iteration logged) and
# $good (the save latest names).
full_disk_run() {  # NAME [FLAGS...]
  local name=$1
  shift
  local disk=$work/$name
  mkdir -p "$disk"
  timeout 120 unshare --mount --propagation private bash -c '
    mount -t tmpfs -o size='"$size_kib"'k tmpfs "$1" || exit 99
    shift
    "$@"
    rc=$?
    cp -r "$0/ckpt" "$0.kept" 2>/dev/null
    exit $rc' "$disk" "$disk" "${mpirun[@]}" -n 2 "$tessel" train "${flags[@]}" --save "$disk/ckpt" \
    --save-interval 3 --log-json "$work/$name.jsonl" "$@" > "$work/$name.out" 2>&1
  expect_full_disk $? "$work/$name.out" "safetensors"
  good=$(latest "$disk.kept") || fail "$name: no save survived"
  expect_text "$work/$name.out" "the checkpoint save of iteration $((good + 3)) failed"
  expect_text "$work/$name.out" "latest_checkpointed_iteration.txt still names iteration $good"
  last=$(records "$work/$name.jsonl" | tail -1 | cut -d' ' -f1)
  echo "ok: $name: stopped after iteration $last; latest names $good"
  "$tessel" checkpoint verify "$disk.kept" || fail "$name: the last good save does not verify"
  # Resume the last good save to the end.
  timeout 120 "${mpirun[@]}" -n 2 "$tessel" train "${flags[@]}" --load "$disk.kept" \
    --log-json "$work/$name.resumed.jsonl" > "$work/$name.resumed.out" 2>&1 ||
    { cat "$work/$name.resumed.out"; fail "$name: the resume failed"; }
  head -n "$good" "$work/$name.jsonl" > "$work/$name.kept.jsonl"
  cat "$work/$name.kept.jsonl" "$work/$name.resumed.jsonl" > "$work/$name.whole.jsonl"
  same_records "$work/straight.jsonl" "$work/$name.whole.jsonl"
}

full_disk_run sync
[ "$last" -eq $((good + 3)) ] || fail "sync: stopped after iteration $last, not in the failed save's $((good + 3))"
full_disk_run async --async-save
# Raised by the first iteration's poll after the writer failed: before the next save is due.
[ "$last" -ge $((good + 4)) ] && [ "$last" -le $((good + 5)) ] ||
  fail "async: stopped after iteration $last, not after the failed save ($((good + 3))) and before the next"
echo "ok: a full disk stops the run at the failed save, and the last good one resumes"
