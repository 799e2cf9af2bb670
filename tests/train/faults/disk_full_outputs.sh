#!/usr/bin/env bash
# A full disk under what a run writes besides its saves (disk_full.sh): --log-json, the resume's
# rewrite of --log-json, --pipeline-timeline and the --save-hf export. Each stops the run with one
# error naming the file and "No space left on device", a non-zero exit and nothing lost: the log
# keeps whole records only (those before the one that failed, bitwise the uninterrupted run's), a
# rewrite that fails leaves the log as it was, and no half file or temporary file is left.
. "$(dirname "$0")/lib.sh"
flags=("${model[@]}" --tp 2 --train-iters 60)
timeout 120 "${mpirun[@]}" -n 2 "$tessel" train "${flags[@]}" --log-json "$work/straight.jsonl" \
  > "$work/straight.out" 2>&1 || { cat "$work/straight.out"; fail "the uninterrupted run failed"; }

# --log-json on 8 KiB: the run stops at the iteration whose record did not fit.
disk=$work/log_disk
on_small_disk 8 "$disk" "${mpirun[@]}" -n 2 "$tessel" train "${flags[@]}" --log-json "$disk/run.jsonl" \
  > "$work/log.out" 2>&1
expect_full_disk $? "$work/log.out" "--log-json $disk/run.jsonl: write failed"
log=$disk.kept/run.jsonl
kept=$(count_records "$log")
[ "$(tail -c 1 "$log" | od -An -c | tr -d ' ')" = '\n' ] || fail "the log ends mid-line"
python3 -c 'import json, sys; [json.loads(l) for l in open(sys.argv[1])]' "$log" || fail "a record of the log is cut"
expect_text "$work/log.out" "it keeps the $kept records before it"
last=$(grep -o "^iter *[0-9]*" "$work/log.out" | tail -1 | grep -o "[0-9]*$")
[ "$last" -eq $((kept + 1)) ] || fail "stopped after iteration $last, not at the lost record's $((kept + 1))"
head -n "$kept" "$work/straight.jsonl" > "$work/straight.head.jsonl"
same_records "$work/straight.head.jsonl" "$log"
ls "$disk.kept" | grep -q tmp && fail "a temporary file is left: $(ls "$disk.kept")"
echo "ok: a full disk under --log-json stops the run at iteration $last, $kept whole records kept"

# The resume's rewrite of --log-json on a disk with no room left: the log is left as it was.
timeout 120 "${mpirun[@]}" -n 2 "$tessel" train "${flags[@]}" --save "$work/ckpt" --save-interval 10 \
  --exit-interval 20 --log-json "$work/resume.jsonl" > "$work/before.out" 2>&1 ||
  { cat "$work/before.out"; fail "the run before the resume failed"; }
disk=$work/resume_disk
on_small_disk 64 "$disk" bash -c 'cp "$1" "$2/run.jsonl"; dd if=/dev/zero of="$2/filler" bs=4k 2>/dev/null
  shift 2; exec "$@"' fill "$work/resume.jsonl" "$disk" \
  "${mpirun[@]}" -n 2 "$tessel" train "${flags[@]}" --save "$work/ckpt" --load "$work/ckpt" \
  --log-json "$disk/run.jsonl" > "$work/resume.out" 2>&1
expect_full_disk $? "$work/resume.out" "cannot rewrite the"
expect_text "$work/resume.out" "the file is left as it was"
cmp "$work/resume.jsonl" "$disk.kept/run.jsonl" || fail "the failed rewrite changed the log"
ls "$disk.kept" | grep -q tmp && fail "a temporary file is left: $(ls "$disk.kept")"
echo "ok: a resume on a full disk keeps the log whole"

# --pipeline-timeline (PP 2, 32 microbatches: tens of KiB) on 4 KiB.
disk=$work/timeline_disk
on_small_disk 4 "$disk" "${mpirun[@]}" -n 2 "$tessel" train "${sizes[@]}" "${optim[@]}" --seed 7 \
  --threads 1 --data-path "$src/data/kjv-genesis-esther.txt" --pp 2 --train-iters 2 --eval-iters 0 \
  --micro-batch-size 1 --global-batch-size 32 --pipeline-timeline "$disk/timeline.json" \
  > "$work/timeline.out" 2>&1
expect_full_disk $? "$work/timeline.out" "--pipeline-timeline $disk/timeline.json"
[ -z "$(ls "$disk.kept")" ] || fail "the failed timeline left $(ls "$disk.kept")"
echo "ok: a full disk under --pipeline-timeline is an error, nothing left"

# The --save-hf export at the end of a run, and `tessel export`, on 16 KiB.
disk=$work/export_disk
on_small_disk 16 "$disk" "${mpirun[@]}" -n 2 "$tessel" train "${model[@]}" --tp 2 --train-iters 2 --eval-iters 0 \
  --save-hf "$disk/hf" > "$work/export.out" 2>&1
expect_full_disk $? "$work/export.out" "model.safetensors"
[ -z "$(ls "$disk.kept/hf")" ] || fail "the failed export left $(ls "$disk.kept/hf")"
on_small_disk 16 "$disk" "$tessel" export "${sizes[@]}" --out "$disk/out" > "$work/export2.out" 2>&1
expect_full_disk $? "$work/export2.out" "model.safetensors"
echo "ok: a full disk under an export is an error, nothing left"

# tessel tokenizer train on 8 KiB: the error names the file asked for, not its temporary.
disk=$work/tokenizer_disk
head -c 20000 "$src/data/kjv-genesis-esther.txt" > "$work/text.txt"
on_small_disk 8 "$disk" "$tessel" tokenizer train --input "$work/text.txt" --vocab-size 300 --model-type byte-bpe \
  --output "$disk/tok" > "$work/tokenizer.out" 2>&1
expect_full_disk $? "$work/tokenizer.out" "$disk/tok/tokenizer"
grep -q "\.tmp\." "$work/tokenizer.out" && fail "the error names a temporary file"
echo "ok: a full disk under tokenizer train names the file it writes"
