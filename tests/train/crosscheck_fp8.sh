#!/usr/bin/env bash
# tessel --fp8-format against the independent PyTorch reference (tools/crosscheck/fp8_reference.py):
# gpt2 and llama from the same exported weights on the same samples, the transformer layers' linear
# products on operands quantised by each current-scaling recipe (tensorwise, blockwise, mxfp8) with
# hybrid's E5M2 gradients, everything else fp32: every iteration's loss within 1e-4 relative over
# 10 iterations.
# Needs Debian's python3-torch (scripts/install-test-deps.sh, which scripts/test.sh runs).
source "$(dirname "$0")/crosscheck_prelude.sh" "$@"
"$tessel" data index --data-path "$src/data/kjv-genesis-esther.txt" --split 100,0,0 \
  --seq-length 64 --train-samples 80 --dump-samples "$work/samples" > /dev/null
train="--micro-batch-size 2 --global-batch-size 8 --seq-length 64 --train-iters 10 --lr 1e-3 --min-lr 1e-4 --lr-warmup-iters 3
       --lr-decay-style cosine --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95
       --adam-eps 1e-8 --clip-grad 1.0"
nodrop="--hidden-dropout 0 --attention-dropout 0 --eval-iters 0"
for arch in gpt2 llama; do
  model="--arch $arch --num-layers 2 --hidden-size 64 --num-attention-heads 4"
  [ "$arch" = llama ] && model="$model --group-query-attention --num-query-groups 2 --ffn-hidden-size 160"
  "$tessel" export --out "$work/$arch" $model --seq-length 64 --seed 7 > /dev/null
  for recipe in tensorwise blockwise mxfp8; do
    fp8="--fp8-format hybrid --fp8-recipe $recipe"
    "$tessel" train --init-from "$work/$arch" $model $train $nodrop $fp8 \
      --data-path "$src/data/kjv-genesis-esther.txt" --split 100,0,0 \
      --log-interval 1 --log-json "$work/$arch.$recipe.tessel.jsonl" > /dev/null
    "$python" "$src/tools/crosscheck/fp8_reference.py" --model "$work/$arch" $train $fp8 \
      --samples "$work/samples/train_samples.npy" --log-json "$work/$arch.$recipe.torch.jsonl" > /dev/null
    echo "== $arch $recipe"
    "$python" "$src/tools/crosscheck/compare.py" "$work/$arch.$recipe.tessel.jsonl" "$work/$arch.$recipe.torch.jsonl" \
      --rtol 1e-4 --grad-norm-rtol 1e-3
  done
done
