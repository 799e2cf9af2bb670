#!/usr/bin/env bash
# Data files that are not what the run expects (issue 26): a cached shuffle index zero-filled
# under an intact header, an index cache left from other data, an absurd number of samples, and
# a .bin truncated while two ranks train on it. Each is one error naming the file, a non-zero
# exit and no signal.
. "$(dirname "$0")/lib.sh"
"$tessel" preprocess --input "$src/data/kjv-genesis-esther.txt" --output-prefix "$work/data/kjv" \
  > /dev/null || fail "preprocess failed (its output folder is created)"
prefix=$work/data/kjv_text_document
on_data=("${sizes[@]}" "${optim[@]}" --micro-batch-size 2 --global-batch-size 8 --seed 7
         --threads 1 --data-path "$prefix" --log-interval 1)
timeout 60 "$tessel" train "${on_data[@]}" --train-iters 2 --eval-iters 0 > "$work/cache.out" 2>&1 ||
  { cat "$work/cache.out"; fail "the run that builds the index cache failed"; }
cache=$prefix/cache/GPTDataset_indices
shuffle=$(ls "$cache"/*-GPTDataset-train-shuffle_index.npy)

# A zero-filled shuffle index (every sample 0) under its intact header.
cp "$shuffle" "$work/shuffle.npy"
python3 - "$shuffle" <<'PY'
import sys
data = bytearray(open(sys.argv[1], "rb").read())
header = 10 + int.from_bytes(data[8:10], "little")
data[header:] = bytes(len(data) - header)
open(sys.argv[1], "wb").write(data)
PY
expect_refused 60 "shuffle_index.npy: sample 0 appears twice" "$tessel" train "${on_data[@]}" --train-iters 2 --eval-iters 0
cp "$work/shuffle.npy" "$shuffle"

# The cache of other data: the dataset rebuilt from 60 % of the corpus under the same prefix.
head -c 1100000 "$src/data/kjv-genesis-esther.txt" > "$work/part.txt"
"$tessel" preprocess --input "$work/part.txt" --output-prefix "$work/part" > /dev/null || fail "preprocess failed"
mv "$work/part_text_document.bin" "$prefix.bin"
mv "$work/part_text_document.idx" "$prefix.idx"
expect_refused 60 "built from other data than $prefix.bin/.idx now hold" \
  "$tessel" train "${on_data[@]}" --train-iters 2 --eval-iters 0
rm -rf "$cache"

# Indices past any machine's memory are refused up front, not built for hours.
expect_refused 60 "GiB of memory" "$tessel" train "${on_data[@]}" --train-iters 2000000000 --eval-iters 0

# The .bin truncated under a run of two ranks.
timeout 120 "${mpirun[@]}" -n 2 "$tessel" train "${on_data[@]}" --train-iters 3000 --eval-iters 0 --tp 2 \
  --log-json "$work/run.jsonl" > "$work/run.out" 2>&1 &
job=$!
background+=("$job")
wait_for_records "$work/run.jsonl" 3 60 "$job"
truncate -s 4096 "$prefix.bin"
wait "$job"
rc=$?
cat "$work/run.out"
[ "$rc" -ne 0 ] || fail "the run on a truncated .bin exited 0"
[ "$rc" -lt 124 ] || fail "the run on a truncated .bin exited $rc (a signal or the time limit)"
expect_one_report "$work/run.out"
expect_text "$work/run.out" "$prefix.bin: the file shrank under the run (bytes"
grep -qi "bus error\|signal 7" "$work/run.out" && fail "a bus error"
[ "$(count_records "$work/run.jsonl")" -lt 3000 ] || fail "the run did not stop"
echo "ok: a .bin truncated under the run is an error naming it"
