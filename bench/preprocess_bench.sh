#!/bin/bash
# `tessel preprocess` throughput (input MB/s, 1 MB = 10^6 bytes) with 1 and 2 workers, alternating
# 1 2 1 2 ... so that load from other jobs on the shared machine falls on both, on two JSONL inputs:
# the bundled corpus (one paragraph per line, 1.9 MB) and a larger synthetic one (the corpus's
# paragraphs in shuffled order, SYNTH_COPIES times, with a second key; ~100 MB by default).
#
#   bench/preprocess_bench.sh [--rounds R] [TOKENIZER FLAGS ...]
#
# Tokenizer flags go to preprocess as given (default: the byte tokenizer). Each run's MB/s comes
# from preprocess's summary line, beside the CPU seconds the process used (user + sys, from
# /usr/bin/time: independent of how many cores other jobs leave free); the summary gives
# min / median / max per worker count and the ratio 2 workers / 1 worker. Writes only to a
# temporary folder.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tessel=${TESSEL:-$root/build/tessel}
rounds=5
if [ "${1:-}" = --rounds ]; then rounds=$2; shift 2; fi
[ -x "$tessel" ] || { echo "preprocess_bench.sh: $tessel not found (build first)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 - "$root/data/kjv-genesis-esther.txt" "$work" "${SYNTH_COPIES:-50}" <<'PY'
import json, random, sys
text = open(sys.argv[1], encoding="utf-8").read()
paragraphs = [p + "\n\n" for p in text.split("\n\n")]
with open(sys.argv[2] + "/corpus.jsonl", "w") as f:
    for p in paragraphs:
        f.write(json.dumps({"text": p}) + "\n")
rng = random.Random(1234)
with open(sys.argv[2] + "/synthetic.jsonl", "w") as f:
    for copy in range(int(sys.argv[3])):
        order = list(range(len(paragraphs)))
        rng.shuffle(order)
        for i in order:
            f.write(json.dumps({"id": f"{copy}-{i}", "text": paragraphs[i]}) + "\n")
PY

load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p') | $(nproc) cores | tokenizer: ${*:-ByteTokenizer}"
for input in corpus synthetic; do
  size=$(stat -c %s "$work/$input.jsonl")
  echo "== $input.jsonl: $((size / 1000000)) MB"
  for r in $(seq 1 "$rounds"); do
    line="round $r | load $(load)"
    for workers in 1 2; do
      rate=$(/usr/bin/time -f "%U %S" -o "$work/time" "$tessel" preprocess --input "$work/$input.jsonl" \
               --output-prefix "$work/out" --workers "$workers" "$@" |
             sed -n 's/.* s: \([0-9.]*\) MB\/s.*/\1/p')
      cpu=$(awk '{ printf "%.2f", $1 + $2 }' "$work/time")
      echo "$rate" >> "$work/$input.$workers"
      line="$line | $workers worker(s) $rate MB/s, $cpu cpu s"
    done
    echo "$line"
  done
  paste "$work/$input.1" "$work/$input.2" | awk '{ print $2 / $1 }' > "$work/$input.ratio"
  stats() { sort -g "$1" | awk '{ v[NR] = $1 } END { printf "min %.2f median %.2f max %.2f", v[1], v[int((NR + 1) / 2)], v[NR] }'; }
  echo "$input: 1 worker MB/s $(stats "$work/$input.1") | 2 workers MB/s $(stats "$work/$input.2") | ratio $(stats "$work/$input.ratio")"
done
