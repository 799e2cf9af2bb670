#!/bin/bash
# Training throughput of tessel's Qwen3-Next model against the PyTorch reference implementation
# (tools/crosscheck/qwen3_next_reference.py: the chunked delta rule, chunk 64) on one thread, the
# reference run at its best (bench/run_pytorch.sh: tcmalloc, OpenBLAS's fastest core type). The
# model is the issue's small one: hidden 256, 8 layers (6 Gated DeltaNet, 2 gated attention),
# 64 experts top-4 with a gated shared expert, seq 256, micro batch 4; both train the same
# folder (written by `tessel export`) on the same samples. Runs alternate tessel, PyTorch, ...;
# each round's rate is the median over its timed iterations (tessel's tokens_per_s, the
# reference's batch · seq / step_ms), the summary the median of the rounds' ratios.
#
#   bench/qwen3_next_throughput.sh [--rounds R] [--iters N] [--warmup W]
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tessel=${TESSEL:-$root/build/tessel}
corpus=$root/data/kjv-genesis-esther.txt
rounds=3 iters=5 warmup=2
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "qwen3_next_throughput.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$tessel" ] || { echo "qwen3_next_throughput.sh: $tessel not found (build first)" >&2; exit 1; }
source "$root/bench/configs.sh"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
seq=256 batch=4 total=$((warmup + iters))
model="--arch llama --num-layers 8 --hidden-size 256 --num-attention-heads 4 --group-query-attention --num-query-groups 2
  --kv-channels 64 --experimental-attention-variant gdn --linear-attention-freq 4
  --linear-num-key-heads 2 --linear-num-value-heads 4 --linear-key-head-dim 64
  --linear-value-head-dim 64 --attention-output-gate --qk-layernorm --apply-layernorm-1p
  --rotary-percent 0.25 --num-experts 64 --moe-router-topk 4 --moe-ffn-hidden-size 128
  --moe-shared-expert-intermediate-size 128 --moe-shared-expert-gate
  --untie-embeddings-and-output-weights"
train="--micro-batch-size $batch --global-batch-size $batch --seq-length $seq --train-iters $total
  --lr 1e-3 --lr-decay-style constant"
# tessel's flags for what the reference does anyway: no evaluation, no dropout (Megatron's 0.1).
tessel_only="--eval-iters 0 --hidden-dropout 0 --attention-dropout 0"
"$tessel" export --out "$work/model" $model --seq-length $seq --seed 7 --hf-model-type qwen3_next >/dev/null
"$tessel" data index --data-path "$corpus" --split 100,0,0 --seq-length $seq \
  --train-samples $((batch * total)) --dump-samples "$work/samples" >/dev/null

load() { cut -d' ' -f1-3 /proc/loadavg; }
cpu=$(cpu_model)
echo "Qwen3-Next d256 L8 (6 GDN + 2 attention) E64 top-4 + shared, T$seq B$batch, 1 thread," \
  "$warmup warm-up + $iters timed iterations, $rounds rounds, $(date -u '+%F %T') UTC"
echo "cpu: $cpu; load before: $(load)"
pick_openblas_coretype 1 "$work" >/dev/null

median_rate() {  # $1: log, $2: tessel|torch; the median tok/s of the timed iterations
  python3 - "$1" "$2" "$warmup" $((batch * seq)) <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
timed = [r for r in rows if r["iteration"] > int(sys.argv[3])]
if sys.argv[2] == "tessel":
    print(f'{statistics.median(r["tokens_per_s"] for r in timed):.1f}')
else:
    print(f'{int(sys.argv[4]) / (statistics.median(r["step_ms"] for r in timed) / 1e3):.1f}')
PY
}

printf '%-5s %12s %12s %7s   %s\n' round "tessel tok/s" "torch tok/s" ratio "load (1 5 15 min)"
: >"$work/ratios"
for r in $(seq 1 "$rounds"); do
  OMP_NUM_THREADS=1 "$tessel" train --init-from "$work/model" $train $tessel_only --data-path "$corpus" \
    --split 100,0,0 --log-interval 1 --threads 1 --log-json "$work/tessel_$r.jsonl" >/dev/null
  BENCH_PYTORCH_SCRIPT=$root/tools/crosscheck/qwen3_next_reference.py \
    "$root/bench/run_pytorch.sh" --threads 1 --model "$work/model" $train \
    --samples "$work/samples/train_samples.npy" --log-json "$work/torch_$r.jsonl" >/dev/null
  t=$(median_rate "$work/tessel_$r.jsonl" tessel) p=$(median_rate "$work/torch_$r.jsonl" torch)
  ratio=$(python3 -c "print(f'{$t / $p:.2f}')")
  printf '%-5s %12s %12s %7s   %s\n' "$r" "$t" "$p" "$ratio" "$(load)"
  echo "$ratio" >>"$work/ratios"
done
python3 -c "
import statistics, sys
r = [float(x) for x in open('$work/ratios')]
print(f'ratio tessel/PyTorch: median {statistics.median(r):.2f} (min {min(r):.2f}, max {max(r):.2f}) over {len(r)} rounds; cpu $cpu, OpenBLAS core type $BENCH_OPENBLAS_CORETYPE')"
