#!/usr/bin/env bash
# tessel against the independent PyTorch implementation (tools/crosscheck/): both architectures,
# and llama with q/k/v biases (exported as qwen2) and with QK-norm (qwen3), start from the same
# exported weights and train 10 iterations on the same samples (the GPT dataset's, which
# `tessel data index --dump-samples` writes for the reference) with the same optimizer settings;
# every iteration's loss must agree to 1e-4 relative.
# Needs Debian's python3-torch (scripts/install-test-deps.sh, which scripts/test.sh runs).
source "$(dirname "$0")/crosscheck_prelude.sh" "$@"
"$tessel" data index --data-path "$src/data/kjv-genesis-esther.txt" --split 100,0,0 \
  --seq-length 64 --train-samples 80 --dump-samples "$work/samples" > /dev/null
train="--micro-batch-size 2 --global-batch-size 8 --seq-length 64 --train-iters 10 --lr 1e-3 --min-lr 1e-4 --lr-warmup-iters 3
       --lr-decay-style cosine --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95
       --adam-eps 1e-8 --clip-grad 1.0"
nodrop="--hidden-dropout 0 --attention-dropout 0 --eval-iters 0"  # the reference has no dropout (Megatron's default is 0.1) and no evaluation
for case in gpt2 llama llama_qkv_bias llama_qk_layernorm; do
  arch=${case%%_*}
  model="--arch $arch --num-layers 2 --hidden-size 64 --num-attention-heads 4"
  [ "$arch" = llama ] && model="$model --group-query-attention --num-query-groups 2 --ffn-hidden-size 160"
  [ "$case" = llama_qkv_bias ] && model="$model --add-qkv-bias"
  [ "$case" = llama_qk_layernorm ] && model="$model --qk-layernorm"
  "$tessel" export --out "$work/$case" $model --seq-length 64 --seed 7 > /dev/null
  "$tessel" train --init-from "$work/$case" $model $train $nodrop \
    --data-path "$src/data/kjv-genesis-esther.txt" --split 100,0,0 \
    --log-interval 1 --log-json "$work/$case.tessel.jsonl" > /dev/null
  "$python" "$src/tools/crosscheck/torch_reference.py" --model "$work/$case" $train \
    --samples "$work/samples/train_samples.npy" \
    --log-json "$work/$case.torch.jsonl" > /dev/null
  echo "== $case"
  "$python" "$src/tools/crosscheck/compare.py" "$work/$case.tessel.jsonl" "$work/$case.torch.jsonl" \
    --rtol 1e-4 --grad-norm-rtol 1e-3
done
