#!/usr/bin/env bash
# The main job, the whole pipeline on the bundled corpus: install, build, train a byte-level BPE
# tokenizer, preprocess the corpus into Megatron's .bin/.idx, train the default model on it with
# the seed's layout — TP 2 × PP 2 × DP 2 on 8 local ranks — validating on the held-out split,
# save it with its tokenizer as a Hugging Face folder, then sample from it.
# Extra arguments go to `tessel train`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
corpus=data/kjv-genesis-esther.txt
mkdir -p out/data
build/tessel tokenizer train --input "$corpus" --vocab-size 2048 --model-type byte-bpe \
  --output out/tokenizer
tokenizer=(--tokenizer-type HuggingFaceTokenizer --tokenizer-model out/tokenizer)
build/tessel preprocess --input "$corpus" --output-prefix out/data/kjv --append-eod "${tokenizer[@]}"
progress=()
[ -t 1 ] && progress=(--progress)
# 8 ranks share this machine's cores: one thread each; root needs --allow-run-as-root.
mpirun --allow-run-as-root --oversubscribe -n 8 -x OMP_NUM_THREADS=1 \
  build/tessel train --tp 2 --pp 2 --micro-batch-size 4 --global-batch-size 32 "${tokenizer[@]}" \
  --train-iters 600 --lr 1e-3 --min-lr 1e-4 --lr-warmup-iters 30 --lr-decay-style cosine --log-interval 10 \
  --openai-gelu --hidden-dropout 0 --attention-dropout 0 \
  --data-path out/data/kjv_text_document --split 969,30,1 --eval-interval 200 --eval-iters 4 \
  --save-hf out/default-model "${progress[@]}" "$@"
echo
echo "---- sample ----"
build/tessel generate --model out/default-model --prompt "And God said" --max-new-tokens 120
