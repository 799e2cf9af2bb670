#!/usr/bin/env bash
# tessel --fp16 against the independent PyTorch reference in fp16 (tools/crosscheck/fp16_reference.py):
# gpt2 and llama from the same exported weights on the same samples, GEMM operands rounded to fp16,
# and Megatron's dynamic loss scale started high enough (2^24, hysteresis 1) that the first
# iterations overflow: every iteration's loss within 1e-4 relative, the same steps skipped and the
# same scale after each, over 10 iterations.
# Needs Debian's python3-torch (scripts/install-test-deps.sh, which scripts/test.sh runs).
source "$(dirname "$0")/crosscheck_prelude.sh" "$@"
"$tessel" data index --data-path "$src/data/kjv-genesis-esther.txt" --split 100,0,0 \
  --seq-length 64 --train-samples 80 --dump-samples "$work/samples" > /dev/null
train="--micro-batch-size 2 --global-batch-size 8 --seq-length 64 --train-iters 10 --lr 1e-3 --min-lr 1e-4 --lr-warmup-iters 3
       --lr-decay-style cosine --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95
       --adam-eps 1e-8 --clip-grad 1.0"
scaling="--initial-loss-scale 16777216 --hysteresis 1 --loss-scale-window 3"
nodrop="--hidden-dropout 0 --attention-dropout 0 --eval-iters 0"
for arch in gpt2 llama; do
  model="--arch $arch --num-layers 2 --hidden-size 64 --num-attention-heads 4"
  [ "$arch" = llama ] && model="$model --group-query-attention --num-query-groups 2 --ffn-hidden-size 160"
  "$tessel" export --out "$work/$arch" $model --seq-length 64 --seed 7 > /dev/null
  "$tessel" train --init-from "$work/$arch" $model $train $nodrop --fp16 $scaling \
    --data-path "$src/data/kjv-genesis-esther.txt" --split 100,0,0 \
    --log-interval 1 --log-json "$work/$arch.tessel.jsonl" > /dev/null
  "$python" "$src/tools/crosscheck/fp16_reference.py" --model "$work/$arch" $train $scaling \
    --samples "$work/samples/train_samples.npy" --log-json "$work/$arch.torch.jsonl" > /dev/null
  grep -q '"skipped":true' "$work/$arch.tessel.jsonl" || { echo "$arch: no step was skipped"; exit 1; }
  echo "== $arch"
  "$python" "$src/tools/crosscheck/compare.py" "$work/$arch.tessel.jsonl" "$work/$arch.torch.jsonl" \
    --rtol 1e-4 --grad-norm-rtol 1e-3 --loss-scale
done
