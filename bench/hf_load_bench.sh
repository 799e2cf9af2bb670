#!/usr/bin/env bash
# A pipelined start from Hugging Face weights: a Llama of 8 layers (hidden 1024, vocabulary
# 32,000: 168M parameters, 0.67 GB in F32) written by `tessel export` as one model.safetensors
# and as shards of at most 100 MB with their index, then loaded by PP stages under mpirun
# (hf_load_bench: each stage's weights S, largest tensor T, peak memory of the load, bytes read and
# files opened). Memory, not time: one round per folder is enough.
# Then the same stages split over TP 2 too (PP·TP ranks): a slice goes through one buffer.
#   bench/hf_load_bench.sh [PP]    (from the repository root, after building)
set -euo pipefail
pp=${1:-4}
tessel=${TESSEL:-build/tessel}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
model=(--num-layers 8 --hidden-size 1024 --num-attention-heads 16 --ffn-hidden-size 2816 --vocab-size 32000
       --seq-length 128)
echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; PP $pp; load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
"$tessel" export --arch llama "${model[@]}" --seed 3 --out "$work/one" > /dev/null
"$tessel" export --arch llama "${model[@]}" --seed 3 --out "$work/shards" --max-shard-size 100MB > /dev/null
echo "one file: $(du -m "$work/one/model.safetensors" | cut -f1) MB; shards: $(ls "$work/shards" | grep -c '^model-') files"
for run in "one 1" "shards 1" "shards 2"; do
  read -r folder tp <<< "$run"
  echo "## $folder, PP $pp x TP $tp"
  mpirun --allow-run-as-root --oversubscribe -n $((pp * tp)) -x OMP_NUM_THREADS=1 \
    "$(dirname "$tessel")/bench/hf_load_bench" --folder "$work/$folder" --tp "$tp" "${model[@]}"
done
