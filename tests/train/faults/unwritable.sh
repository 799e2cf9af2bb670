#!/usr/bin/env bash
# Folders a run cannot write into are refused before the first iteration (CI runs as root, whom
# file modes do not stop: the folders lie under a plain file, or on a read-only tmpfs); and an
# error every rank meets is reported once, by rank 0, every rank exiting non-zero without an
# MPI_ABORT banner.
. "$(dirname "$0")/lib.sh"
flags=("${model[@]}" --train-iters 3)
touch "$work/plain-file"

refused() {  # NAME TEXT FLAGS...: a 2-rank run that must stop before iteration 1 with TEXT
  local name=$1 text=$2
  shift 2
  timeout 60 "${mpirun[@]}" -n 2 "$tessel" train "${flags[@]}" "$@" > "$work/$name.out" 2>&1
  local rc=$?
  [ "$rc" -ne 0 ] || { cat "$work/$name.out"; fail "$name: exit 0"; }
  [ "$rc" -ne 124 ] || { cat "$work/$name.out"; fail "$name: still running after 60 s"; }
  if grep -q "^iter " "$work/$name.out"; then cat "$work/$name.out"; fail "$name: it trained"; fi
  expect_one_report "$work/$name.out"
  expect_text "$work/$name.out" "$text"
  echo "ok: $name: $(grep 'tessel: error' "$work/$name.out")"
}

refused save "--save $work/plain-file/ckpt: cannot create the folder" --save "$work/plain-file/ckpt"
refused save_hf "--save-hf $work/plain-file/hf: cannot create the folder" --save-hf "$work/plain-file/hf"
refused log_json "--log-json $work/plain-file/log.jsonl: cannot create it" --log-json "$work/plain-file/log.jsonl"
flags=("${flags[@]//kjv-genesis-esther.txt/missing.txt}")  # a data file that does not exist
refused data "missing.txt"
flags=("${model[@]}" --train-iters 3)
echo '{"num_layers": 4294967298}' > "$work/model.json"
refused model_config "num_layers 4294967298 is not a whole number" --model-config "$work/model.json"
refused flags "--clip-grad inf is not a finite number" --clip-grad inf

# A read-only file system, in a private mount namespace.
mkdir -p "$work/ro"
timeout 60 unshare --mount --propagation private bash -c '
  mount -t tmpfs -o ro,size=64k tmpfs "$0" || exit 99
  "$@"' "$work/ro" "${mpirun[@]}" -n 2 "$tessel" train "${flags[@]}" --save-hf "$work/ro/hf" \
  > "$work/ro.out" 2>&1
rc=$?
[ "$rc" -ne 99 ] || fail "cannot mount a tmpfs (the test needs root, as CI runs it)"
[ "$rc" -ne 0 ] || { cat "$work/ro.out"; fail "read-only --save-hf: exit 0"; }
expect_one_report "$work/ro.out"
expect_text "$work/ro.out" "Read-only file system"
if grep -q "^iter " "$work/ro.out"; then fail "read-only --save-hf: it trained"; fi
echo "ok: read-only: $(grep 'tessel: error' "$work/ro.out")"
