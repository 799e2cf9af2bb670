#!/usr/bin/env bash
# Checks that TESSEL_CPU_ISA=avx2 on the native build (the CPU kernels' AVX2 twin,
# cmake/cpu_isa_twin.cmake) computes what a whole build for an AVX2 CPU computes: builds that
# build's tessel (scripts/build-avx2.sh tessel), then trains five models both ways — GPT-2 fp32,
# GPT-2 bf16, a llama under CP 2 (ring attention), the Qwen3-Next hybrid (gated delta rule, MoE)
# and a llama MoE under EP 2 — and compares what their --log-json files computed (every loss and
# gradient norm and learning rate, printed in full; not the timings) byte for byte. On a CPU
# without AVX-512 the native build is that build: nothing to check. Usage: scripts/check-avx2-twin.sh (from anywhere; uses build/ and build-avx2/).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! grep -qw avx512f /proc/cpuinfo; then
  echo "check-avx2-twin: this CPU has no AVX-512: the native build is the AVX2 build"
  exit 0
fi
scripts/build-avx2.sh tessel > /dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpirun=(mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 -x TESSEL_CPU_ISA)
common="--mock-data --tokenizer-type NullTokenizer --vocab-size 256 --micro-batch-size 2 --global-batch-size 4
        --train-iters 4 --eval-iters 0 --log-interval 1 --lr 1e-2 --lr-warmup-iters 0 --threads 1"
small="--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64"
declare -A configs=(
  [gpt2_fp32]="1 --arch gpt2 $small"
  [gpt2_bf16]="1 --arch gpt2 $small --bf16"
  [llama_cp2]="2 --arch llama $small --context-parallel-size 2"
  [qwen3_next]="1 --arch llama --num-layers 4 --hidden-size 64 --num-attention-heads 4 --group-query-attention
    --num-query-groups 2 --kv-channels 32 --experimental-attention-variant gdn --linear-num-key-heads 2
    --linear-key-head-dim 16 --linear-value-head-dim 16 --attention-output-gate --qk-layernorm
    --apply-layernorm-1p --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 32 --moe-shared-expert-gate
    --moe-aux-loss-coeff 0.001 --seq-length 32 --linear-attention-freq 4 --linear-num-value-heads 4
    --rotary-percent 0.25 --moe-shared-expert-intermediate-size 32"
  [moe_ep2]="2 --arch llama $small --num-experts 4 --moe-router-topk 2 --expert-model-parallel-size 2"
)
failed=0
for name in "${!configs[@]}"; do
  read -r ranks flags <<< "${configs[$name]}"
  for side in twin build-avx2; do
    if [ $side = twin ]; then tessel=build/tessel; else tessel=build-avx2/tessel; fi
    launch=()
    [ "$ranks" -gt 1 ] && launch=("${mpirun[@]}" -n "$ranks")
    TESSEL_CPU_ISA=avx2 "${launch[@]}" "$tessel" train $common $flags --log-json "$work/$name.$side.jsonl" \
      > "$work/$name.$side.out" 2>&1 || { echo "$name ($side) failed:"; tail -5 "$work/$name.$side.out"; exit 1; }
  done
  for side in twin build-avx2; do  # the computed fields, without the timings (*ms, tokens_per_s)
    /usr/bin/python3 -c '
import json, sys
def values(x):
    if isinstance(x, dict):
        return {k: values(v) for k, v in x.items() if not (k.endswith("ms") or k == "tokens_per_s")}
    return x
for line in sys.stdin:
    print(json.dumps(values(json.loads(line)), sort_keys=True))' < "$work/$name.$side.jsonl" > "$work/$name.$side.values"
  done
  if cmp -s "$work/$name.twin.values" "$work/$name.build-avx2.values"; then
    echo "check-avx2-twin: $name: identical ($(wc -l < "$work/$name.twin.jsonl") iterations)"
  else
    echo "check-avx2-twin: $name: DIFFERENT"; diff "$work/$name.twin.values" "$work/$name.build-avx2.values" | head -4 || true
    failed=1
  fi
done
exit $failed
