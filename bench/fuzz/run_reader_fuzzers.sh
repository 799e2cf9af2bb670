#!/usr/bin/env bash
# libFuzzer runs of the readers of untrusted files: Megatron's .bin/.idx (fuzz_indexed_dataset,
# with the GPT dataset's samples over it) and safetensors (fuzz_safetensors), each for a fixed
# budget under AddressSanitizer and UndefinedBehaviorSanitizer. Installs Debian's clang-14 and
# libclang-rt-14-dev when missing (not a CI dependency: run by hand). Seeds come from tessel itself
# (build/tessel must exist): a preprocessed corpus and an exported model.
#
#   bench/fuzz/run_reader_fuzzers.sh [SECONDS_EACH]     (default 90)
# Prints each fuzzer's final stats (executions, crashes) and exits non-zero on any finding.
set -euo pipefail
cd "$(dirname "$0")/../.."
budget=${1:-90}
missing=()
for p in clang-14 libclang-rt-14-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
[ -x build/tessel ] || { echo "build/tessel is missing: run scripts/build.sh first"; exit 1; }

out=build/fuzz
mkdir -p "$out"
flags=(-std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -Isrc)
data_sources=(src/tessel/data/indexed_dataset.cpp src/tessel/data/mapped_file.cpp
              src/tessel/data/gpt_dataset.cpp src/tessel/data/gpt_indices.cpp
              src/tessel/data/numpy_random.cpp src/tessel/data/npy.cpp)
clang++-14 "${flags[@]}" bench/fuzz/fuzz_indexed_dataset.cpp "${data_sources[@]}" -lfmt -lcrypto \
  -o "$out/fuzz_indexed_dataset"
clang++-14 "${flags[@]}" bench/fuzz/fuzz_safetensors.cpp src/tessel/ckpt/safetensors.cpp \
  src/tessel/core/tensor.cpp -lfmt -o "$out/fuzz_safetensors"

# Seeds: a small corpus preprocessed by tessel (its .idx and .bin in the harness's layout) and the
# weights of a tiny exported model.
seeds=$(mktemp -d)
trap 'rm -rf "$seeds"' EXIT
mkdir -p "$out/corpus_indexed_dataset" "$out/corpus_safetensors"
head -c 3000 data/kjv-genesis-esther.txt > "$seeds/small.txt"
build/tessel preprocess --input "$seeds/small.txt" --output-prefix "$seeds/small" > /dev/null
/usr/bin/python3 - "$seeds/small_text_document" "$out/corpus_indexed_dataset/seed" <<'PY'
import struct, sys
idx = open(sys.argv[1] + ".idx", "rb").read()
bin_ = open(sys.argv[1] + ".bin", "rb").read()
open(sys.argv[2], "wb").write(struct.pack("<I", len(idx)) + idx + bin_)
PY
build/tessel export --out "$seeds/model" --num-layers 1 --hidden-size 8 --num-attention-heads 2 \
  --seq-length 8 > /dev/null
cp "$seeds/model/model.safetensors" "$out/corpus_safetensors/seed"

status=0
for name in indexed_dataset safetensors; do
  echo "== fuzz_$name: $budget s"
  if ! "$out/fuzz_$name" -max_total_time="$budget" -print_final_stats=1 -rss_limit_mb=2048 \
       -artifact_prefix="$out/crash_$name-" "$out/corpus_$name" > "$out/fuzz_$name.log" 2>&1; then
    status=1
    tail -40 "$out/fuzz_$name.log"
  fi
  grep -E "^stat::(number_of_executed_units|peak_rss_mb)|^#[0-9]+ +DONE" "$out/fuzz_$name.log" || true
  grep -E "ERROR: |runtime error" "$out/fuzz_$name.log" | head -5 || true
done
exit $status
