#!/usr/bin/env bash
# One of Megatron-LM's own training scripts under tessel: tests/megatron/NAME.args holds its flags
# as Megatron's file has them (named there), only the sizes scaled to this machine and the paths
# pointed at the bundled corpus. The run must reach its last iteration, or, where the script asks
# for a feature tessel has not built, stop before training with that feature named in the one
# message of the run's rules.
# Usage: run_script.sh NAME TESSEL SOURCE_DIR MPIRUN...
set -euo pipefail
name=$1 tessel=$2 src=$3
shift 3
mpirun=("$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
corpus=$src/data/kjv-genesis-esther.txt

# What the scripts name by path: a Hugging Face tokenizer folder, the same BPE as GPT-2's
# vocab.json + merges.txt, a sentencepiece model (Llama2Tokenizer), and the corpus preprocessed.
tokenizer=$work/tokenizer
"$tessel" tokenizer train --input "$corpus" --vocab-size 1024 --model-type byte-bpe --output "$tokenizer" > /dev/null
/usr/bin/python3 - "$tokenizer/tokenizer.json" "$work" <<'PY'
import json, sys
model = json.load(open(sys.argv[1]))["model"]
json.dump(model["vocab"], open(sys.argv[2] + "/vocab.json", "w"))
merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
open(sys.argv[2] + "/merges.txt", "w").write("#version: 0.2\n" + "\n".join(merges) + "\n")
PY
vocab=$work/vocab.json merges=$work/merges.txt
spm_train --input="$corpus" --model_prefix="$work/spm" --vocab_size=1000 --model_type=bpe \
  --minloglevel=2 > /dev/null 2>&1
spm=$work/spm.model
# One document per line of the corpus, thrice over (39,918 documents): enough that a split as thin
# as Mixtral's 99990,8,2 keeps a document for its valid and test parts.
/usr/bin/python3 - "$corpus" "$work/lines.jsonl" <<'PY'
import json, sys
lines = [l.strip() for l in open(sys.argv[1], encoding="utf-8") if l.strip()]
with open(sys.argv[2], "w", encoding="utf-8") as out:
    for _ in range(3):
        for l in lines:
            out.write(json.dumps({"text": l}) + "\n")
PY
"$tessel" preprocess --input "$work/lines.jsonl" --json-keys text --output-prefix "$work/kjv" --append-eod \
  --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$tokenizer" > /dev/null
"$tessel" preprocess --input "$work/lines.jsonl" --json-keys text --output-prefix "$work/spm" --append-eod \
  --tokenizer-type Llama2Tokenizer --tokenizer-model "$spm" > /dev/null
data=$work/kjv_text_document spm_data=$work/spm_text_document
out=$work/out

ranks=1 iterations=0 refused=""
args=()
# shellcheck source=/dev/null
source "$src/tests/megatron/$name.args"

status=0
log=$(timeout 900 "${mpirun[@]}" -n "$ranks" "$tessel" train "${args[@]}" 2>&1) || status=$?
fail() { printf '%s\n---- %s\n' "$log" "$1" >&2; exit 1; }
if [ -n "$refused" ]; then
  [ "$status" -eq 1 ] || fail "expected a refusal, got exit code $status"
  grep -q "tessel: error: .*$refused" <<< "$log" || fail "the refusal does not name: $refused"
  echo "refused as expected: $(grep -m1 -o "tessel: error: .*" <<< "$log")"
else
  [ "$status" -eq 0 ] || fail "exit code $status"
  grep -Eq "iter +$iterations/$iterations \|" <<< "$log" || fail "the run did not reach iteration $iterations"
  echo "ran to iteration $iterations"
fi
