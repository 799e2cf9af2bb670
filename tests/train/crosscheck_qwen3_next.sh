#!/usr/bin/env bash
# tessel's Qwen3-Next / Qwen3.5 model against the independent PyTorch implementation
# (tools/crosscheck/qwen3_next_reference.py, written from Hugging Face's modelling code): a model
# of three Gated DeltaNet layers and one gated attention layer, 8 experts top-2 and a gated shared
# expert, exported by tessel as a Qwen3-Next folder and converted by `tessel export --init-from`
# into the Qwen3.5 layout. Both folders train 10 iterations in both implementations on the same
# samples (`tessel data index --dump-samples`), with the aux loss off and on, and once on packed
# documents (a preprocessed dataset of one document per line: the conv history and the delta-rule
# state restart at each eod). Every iteration's loss agrees to 1e-4 relative, the grad norm to
# 1e-3; the two layouts' tessel runs agree to 1e-6 (the same model in two files). With
# multi-token prediction (--mtp-num-layers 1: the reference's MTP, written from Megatron's and
# vLLM's qwen3_next_mtp semantics), both families, aux loss off and on: the LM and the MTP loss
# each iteration to 1e-4.
# Needs Debian's python3-torch (scripts/install-test-deps.sh).
source "$(dirname "$0")/crosscheck_prelude.sh" "$@"
cd "$work"
corpus="$src/data/kjv-genesis-esther.txt"
tokenizer="--tokenizer-type HuggingFaceTokenizer --tokenizer-model tok"
model="--arch llama --num-layers 4 --hidden-size 64 --num-attention-heads 4 --group-query-attention --num-query-groups 2
       --kv-channels 32 --experimental-attention-variant gdn --linear-attention-freq 4
       --linear-num-key-heads 2 --linear-num-value-heads 4 --linear-key-head-dim 16
       --linear-value-head-dim 16 --attention-output-gate --qk-layernorm --apply-layernorm-1p
       --rotary-percent 0.25 --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 32
       --moe-shared-expert-intermediate-size 32 --moe-shared-expert-gate
       --untie-embeddings-and-output-weights"
train="--micro-batch-size 2 --global-batch-size 8 --seq-length 64 --train-iters 10 --lr 1e-3 --min-lr 1e-4 --lr-warmup-iters 3
       --lr-decay-style cosine --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95
       --adam-eps 1e-8 --clip-grad 1.0"
packed="--reset-position-ids --reset-attention-mask --eod-mask-loss"
nodrop="--hidden-dropout 0 --attention-dropout 0 --eval-iters 0"  # the reference has no dropout (Megatron's default is 0.1) and no evaluation

# The data: a byte-level BPE of 512 tokens (eod 511) and the corpus's first 3,000 lines, one
# document each, preprocessed with an eod after each.
"$tessel" tokenizer train --input "$corpus" --vocab-size 512 --model-type byte-bpe --output tok > /dev/null
head -3000 "$corpus" | "$python" -c "
import json, sys
for line in sys.stdin: print(json.dumps({'text': line}))" > lines.jsonl
"$tessel" preprocess --input lines.jsonl --json-keys text --output-prefix lines --append-eod $tokenizer > /dev/null
data="--data-path lines_text_document $tokenizer --split 100,0,0"
"$tessel" data index $data --seq-length 64 --train-samples 80 --dump-samples samples > /dev/null
eod=$("$tessel" tokenizer inspect $tokenizer | sed -n 's/^eod: \([0-9]*\).*/\1/p')

"$tessel" export --out qwen3_next $model $tokenizer --seq-length 64 --seed 7 --hf-model-type qwen3_next > /dev/null
"$tessel" export --init-from qwen3_next --out qwen3_5_moe --hf-model-type qwen3_5_moe > /dev/null

compare() {
  "$python" "$src/tools/crosscheck/compare.py" "$@"
}

for family in qwen3_next qwen3_5_moe; do
  for aux in 0 0.01; do
    for layout in plain packed; do
      [ "$layout" = packed ] && [ "$aux" = 0 ] && continue
      case=$family.aux$aux.$layout
      flags="--moe-aux-loss-coeff $aux"
      [ "$layout" = packed ] && flags="$flags $packed"
      # The reference divides the summed token losses by the global batch's count: tessel's
      # --calculate-per-token-loss (its default averages the microbatches' means instead).
      per_token=""
      [ "$layout" = packed ] && per_token="--calculate-per-token-loss"
      "$tessel" train --init-from "$family" $train $nodrop $flags $per_token $data --log-interval 1 \
        --log-json "$case.tessel.jsonl" > /dev/null
      ref_flags=$flags
      [ "$layout" = packed ] && ref_flags="$ref_flags --eod-token $eod"
      "$python" "$src/tools/crosscheck/qwen3_next_reference.py" --model "$family" $train $ref_flags \
        --samples samples/train_samples.npy --log-json "$case.torch.jsonl" > /dev/null
      echo "== $case: tessel against PyTorch"
      compare "$case.tessel.jsonl" "$case.torch.jsonl" --rtol 1e-4 --grad-norm-rtol 1e-3
    done
  done
done
for family in qwen3_next qwen3_5_moe; do
  "$tessel" export --out "$family.mtp" $model --mtp-num-layers 1 $tokenizer --seq-length 64 --seed 7 \
    --hf-model-type "$family" > /dev/null
  for aux in 0 0.01; do
    case=$family.mtp.aux$aux
    "$tessel" train --init-from "$family.mtp" $train $nodrop --moe-aux-loss-coeff $aux --mtp-loss-scaling-factor 0.3 \
      $data --log-interval 1 --log-json "$case.tessel.jsonl" > /dev/null
    "$python" "$src/tools/crosscheck/qwen3_next_reference.py" --model "$family.mtp" $train \
      --moe-aux-loss-coeff $aux --mtp-loss-scaling-factor 0.3 --samples samples/train_samples.npy \
      --log-json "$case.torch.jsonl" > /dev/null
    echo "== $case: tessel against PyTorch, with MTP"
    compare "$case.tessel.jsonl" "$case.torch.jsonl" --rtol 1e-4 --grad-norm-rtol 1e-3 --mtp
  done
done
for case in aux0.plain aux0.01.plain aux0.01.packed; do
  echo "== $case: the Qwen3-Next folder against its Qwen3.5 conversion, both in tessel"
  compare "qwen3_next.$case.tessel.jsonl" "qwen3_5_moe.$case.tessel.jsonl" --rtol 1e-6 --grad-norm-rtol 1e-6
done
