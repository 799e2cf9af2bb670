#!/bin/bash
# Tokens/s of `tessel generate`, two binaries side by side (OLD, e.g. a build before incremental
# decoding, and NEW), on one thread, on two small models written by `tessel export` with random
# weights: a Llama (hidden 256, 4 layers, GQA 4/2) and a Qwen3-Next hybrid (hidden 256, 4 layers: 3
# Gated DeltaNet + 1 gated attention, 16 experts top-2 with a gated shared expert), both with a
# context of --seq-length 256. Greedy, --ignore-eos, a 6-token prompt. The rate is that of the
# decoding steps: (N − 1) / (time of N new tokens − time of 1), which takes out the load and the
# prompt; N = 100 for OLD (each token a forward of the whole context: the rate does not depend on
# N) and 1000 for NEW (the context slides every 128 tokens past the first 250, each slide a
# prefill of 128 tokens, counted in). Rounds alternate OLD, NEW; each line is one round, the last
# the medians.
#
#   bench/generate_throughput.sh OLD NEW [--rounds R] [--old-tokens N] [--new-tokens N]
set -euo pipefail

old=$1 new=$2
shift 2
rounds=3 old_tokens=100 new_tokens=1000
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --old-tokens) old_tokens=$2; shift 2 ;;
    --new-tokens) new_tokens=$2; shift 2 ;;
    *) echo "generate_throughput.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common="--arch llama --num-layers 4 --hidden-size 256 --num-attention-heads 4 --group-query-attention --num-query-groups 2
  --seq-length 256 --seed 7"
"$new" export --out "$work/llama" $common >/dev/null
"$new" export --out "$work/qwen3_next" $common --kv-channels 64 --experimental-attention-variant gdn \
  --linear-attention-freq 4 --linear-num-key-heads 2 --linear-num-value-heads 4 \
  --linear-key-head-dim 64 --linear-value-head-dim 64 --attention-output-gate --qk-layernorm \
  --apply-layernorm-1p --rotary-percent 0.25 --num-experts 16 --moe-router-topk 2 \
  --moe-ffn-hidden-size 128 --moe-shared-expert-intermediate-size 128 --moe-shared-expert-gate \
  --untie-embeddings-and-output-weights --hf-model-type qwen3_next >/dev/null

seconds() {  # $1 binary, $2 model, $3 new tokens: wall seconds
  local start end
  start=$(date +%s.%N)
  OMP_NUM_THREADS=1 "$1" generate --model "$2" --prompt "In the" --max-new-tokens "$3" \
    --temperature 0 --ignore-eos --threads 1 >/dev/null
  end=$(date +%s.%N)
  echo "$end - $start" | bc -l
}
rate() {  # $1 binary, $2 model, $3 new tokens: decoding steps per second
  local one many
  one=$(seconds "$1" "$2" 1)
  many=$(seconds "$1" "$2" "$3")
  echo "($3 - 1) / ($many - $one)" | bc -l
}

echo "generate, 1 thread, $old_tokens (old) and $new_tokens (new) new tokens, $rounds rounds, $(date -u '+%F %T') UTC; load $(cut -d' ' -f1-3 /proc/loadavg)"
for model in llama qwen3_next; do
  olds=() news=()
  for r in $(seq 1 "$rounds"); do
    o=$(rate "$old" "$work/$model" "$old_tokens")
    n=$(rate "$new" "$work/$model" "$new_tokens")
    olds+=("$o") news+=("$n")
    printf '%-10s round %d: old %8.1f tok/s  new %8.1f tok/s  (%.1fx)\n' "$model" "$r" "$o" "$n" \
      "$(echo "$n / $o" | bc -l)"
  done
  median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
  mo=$(median "${olds[@]}") mn=$(median "${news[@]}")
  printf '%-10s median : old %8.1f tok/s  new %8.1f tok/s  (%.1fx)\n' "$model" "$mo" "$mn" \
    "$(echo "$mn / $mo" | bc -l)"
done
