#!/usr/bin/env bash
# tessel against the independent PyTorch implementation (tools/crosscheck/): both architectures
# start from the same exported weights and train 10 iterations on the same sequential data with
# the same optimizer settings; every iteration's loss must agree to 1e-4 relative.
# Skipped (exit 77) where PyTorch is not installed: it is a development-time check.
set -euo pipefail
tessel=$1
src=$2
python=/usr/bin/python3
if ! "$python" -c "import torch" 2>/dev/null; then
  echo "PyTorch not found for $python: cross-check skipped"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
train="--data-path $src/data/kjv-genesis-esther.txt --micro-batch-size 2 --global-batch-size 8
       --seq-length 64 --train-iters 10 --lr 1e-3 --min-lr 1e-4 --lr-warmup-iters 3
       --lr-decay-style cosine --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95
       --adam-eps 1e-8 --clip-grad 1.0"
for arch in gpt2 llama; do
  model="--arch $arch --num-layers 2 --hidden-size 64 --num-attention-heads 4"
  [ "$arch" = llama ] && model="$model --num-query-groups 2 --ffn-hidden-size 160"
  "$tessel" export --out "$work/$arch" $model --seq-length 64 --seed 7 > /dev/null
  "$tessel" train --init-from "$work/$arch" $model $train --data-sampling sequential \
    --log-interval 1 --log-json "$work/$arch.tessel.jsonl" > /dev/null
  "$python" "$src/tools/crosscheck/torch_reference.py" --model "$work/$arch" $train \
    --log-json "$work/$arch.torch.jsonl" > /dev/null
  echo "== $arch"
  "$python" "$src/tools/crosscheck/compare.py" "$work/$arch.tessel.jsonl" "$work/$arch.torch.jsonl" \
    --rtol 1e-4 --grad-norm-rtol 1e-3
done
