#!/usr/bin/env bash
# Same seed, same trajectory, bit for bit: runs 14 layouts (one process for each architecture, DP
# with and without the distributed optimizer, TP with sequence parallel, PP, interleaved PP, ZB-V,
# ZB-H1 with post-validation, CP, EP, EP × TP with ETP 2, selective recompute, TP × PP × DP on 8
# ranks) twice with each of two tessel binaries — e.g. one built from the commit before a change
# — and checks that every run's losses, gradient norms and learning rates (--log-json) and final
# weights (--save-hf) are identical to the first binary's first run, byte for byte.
#
#   bench/same_trajectory.sh BASE_TESSEL [NEW_TESSEL]   (NEW_TESSEL: build/tessel)
#
# Prints one line per layout and exits non-zero if any run differs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
base=${1:?usage: same_trajectory.sh BASE_TESSEL [NEW_TESSEL]}
new=${2:-$root/build/tessel}
mpirun=(mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

train="--seq-length 32 --train-iters 6 --eval-iters 0 --lr 3e-3 --min-lr 3e-4 --lr-warmup-iters 2 --lr-decay-style cosine
       --log-interval 1 --seed 11 --threads 1 --global-batch-size 8 --micro-batch-size 2"
gpt2="--arch gpt2 --num-layers 4 --hidden-size 64 --num-attention-heads 8 --ffn-hidden-size 128"
llama="--arch llama --num-layers 4 --hidden-size 64 --num-attention-heads 8 --group-query-attention --num-query-groups 4 --ffn-hidden-size 128"
moe="$llama --num-experts 8 --moe-router-topk 2 --moe-aux-loss-coeff 0.01 --moe-z-loss-coeff 0.001
     --moe-shared-expert-intermediate-size 64 --moe-shared-expert-gate"
# name|ranks|flags
layouts=(
  "gpt2_single|1|$gpt2"
  "llama_single|1|$llama --qk-layernorm --add-qkv-bias"
  "gpt2_dp2|2|$gpt2"
  "llama_dp2_distopt|2|$llama --use-distributed-optimizer --ddp-bucket-size 3000 --overlap-grad-reduce"
  "llama_tp2_sp|2|$llama --tp 2 --sequence-parallel"
  "gpt2_pp2|2|$gpt2 --pp 2"
  "llama_pp2_vpp2|2|$llama --pp 2 --vpp 2"
  "gpt2_pp2_zbv|2|$gpt2 --pp 2 --schedule zb-v"
  "gpt2_dp2_pp2_zbh1_post_validation|4|$gpt2 --pp 2 --schedule zb-h1 --enable-optimizer-post-validation"
  "llama_cp2|2|$llama --cp 2"
  "moe_ep2|2|$moe --ep 2"
  "moe_ep2_tp2_etp2|4|$moe --ep 2 --tp 2 --sequence-parallel --etp 2"
  "llama_pp2_recompute_selective|2|$llama --pp 2 --recompute-granularity selective --recompute-modules core_attn layernorm mlp"
  "gpt2_tp2_pp2_dp2|8|$gpt2 --tp 2 --pp 2"
)

# The trajectory of a --log-json: what must not move (timings and communication counts may).
trajectory() {
  python3 -c 'import json,sys
for line in open(sys.argv[1]):
    j = json.loads(line)
    print(j.get("split", "train"), j["iteration"], repr(j["loss"]), repr(j.get("grad_norm")), repr(j.get("lr")))' "$1"
}

run() {  # binary name ranks flags out
  local bin=$1 ranks=$2 flags=$3 out=$4 launcher=()
  [ "$ranks" -gt 1 ] && launcher=("${mpirun[@]}" -n "$ranks")
  mkdir -p "$out"
  # shellcheck disable=SC2086
  if ! timeout 300 "${launcher[@]}" "$bin" train $flags $train --log-json "$out/log.jsonl" \
      --save-hf "$out/model" > "$out/output.txt" 2>&1; then
    echo "run failed: $bin ($ranks ranks) $flags" >&2
    tail -20 "$out/output.txt" >&2
    return 1
  fi
  trajectory "$out/log.jsonl" > "$out/trajectory.txt"
}

status=0
for entry in "${layouts[@]}"; do
  IFS='|' read -r name ranks flags <<< "$entry"
  verdict=identical
  for who in base new; do
    bin=$base
    [ "$who" = new ] && bin=$new
    for attempt in 1 2; do
      out="$work/$name/$who$attempt"
      run "$bin" "$ranks" "$flags" "$out" || { verdict="run failed"; continue; }
      ref="$work/$name/base1"
      if ! cmp -s "$ref/trajectory.txt" "$out/trajectory.txt"; then
        verdict="losses differ ($who run $attempt)"
      elif ! cmp -s "$ref/model/model.safetensors" "$out/model/model.safetensors"; then
        verdict="weights differ ($who run $attempt)"
      fi
    done
  done
  printf '%-36s %d ranks  %s\n' "$name" "$ranks" "$verdict"
  [ "$verdict" = identical ] || status=1
done
exit $status
