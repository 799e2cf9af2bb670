#!/bin/bash
# Fully sharded data parallelism's memory (issue 39): each rank's peak resident memory over a
# whole run (GNU time's maximum RSS: setup, training and the end) of a model whose weights
# dominate — llama, 8 layers of hidden 768 (SwiGLU 2048), vocabulary 16384 untied: 82 M
# parameters, 328 MB of fp32 — at DP 4 under each --data-parallel-sharding-strategy, with
# activations kept small (micro batch 1, 128 positions). Beside each, tessel's own count of the
# rank's model state (--profile-report: parameters, gradients, Adam's moments, gathered units).
#
#   bench/fsdp_memory.sh [--ranks N] [--iters N]
#
# Prints per strategy the largest per-rank peak RSS and its ratio to no_shard's; the same less the
# baseline — the peak RSS of the same command on a 1-layer model of hidden 64 (state < 10 MB), which
# holds the same binary, MPI buffers and thread stacks — so that the ratio is the state's; and
# tessel's own count of the largest rank's state.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tessel=${TESSEL:-$root/build/tessel}
ranks=4 iters=2
while [ $# -gt 0 ]; do
  case $1 in
    --ranks) ranks=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    *) echo "fsdp_memory.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$tessel" ] || { echo "fsdp_memory.sh: $tessel not found (build first)" >&2; exit 1; }
command -v /usr/bin/time >/dev/null || { echo "fsdp_memory.sh: GNU time (/usr/bin/time) not found" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
model=(--arch llama --num-layers 8 --hidden-size 768 --num-attention-heads 12 --ffn-hidden-size 2048
  --vocab-size 16384 --untie-embeddings-and-output-weights)
small=(--arch llama --num-layers 1 --hidden-size 64 --num-attention-heads 4 --ffn-hidden-size 128 --vocab-size 16384)
common=(--seq-length 128 --micro-batch-size 1 --global-batch-size "$ranks" --train-iters "$iters" --eval-iters 0
  --log-interval 1 --threads 1 --profile-report --data-path "$root/data/kjv-genesis-esther.txt")
run() {  # $1: name; the rest: flags. Writes $work/$1.rss (one max RSS in KiB per rank) and .log
  local name=$1; shift
  (cd "$work" && mpirun --allow-run-as-root --oversubscribe -n "$ranks" -x OMP_NUM_THREADS=1 \
    /usr/bin/time -f "maxrss %M" -o "$work/$name.time.%q{OMPI_COMM_WORLD_RANK}" "$tessel" train "$@" "${common[@]}" \
    >"$work/$name.log" 2>&1) || { echo "fsdp_memory.sh: $name failed:" >&2; tail -5 "$work/$name.log" >&2; exit 1; }
  cat "$work/$name".time.* | awk '/maxrss/ {print $2}' >"$work/$name.rss"
}
echo "fsdp_memory.sh: DP $ranks, $iters iterations, $(date -u '+%F %T') UTC, cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
run baseline "${small[@]}"
strategies=(no_shard optim optim_grads optim_grads_params)
for s in "${strategies[@]}"; do run "$s" "${model[@]}" --use-megatron-fsdp --data-parallel-sharding-strategy "$s"; done
python3 - "$work" "${strategies[@]}" <<'PY'
import re, sys
work, names = sys.argv[1], sys.argv[2:]
def peak(name):
    return max(int(x) for x in open(f"{work}/{name}.rss").read().split()) / 1024
def state(name):  # tessel's own count, rank by rank: the largest rank's total
    rows = re.findall(r"rank (\d+) model state ([\d.]+) MiB", open(f"{work}/{name}.log").read())
    return max(float(v) for _, v in rows) if rows else float("nan")
base = peak("baseline")
ref, ref_state = peak(names[0]), state(names[0])
print(f"baseline (same binary and MPI, a 1-layer hidden-64 model): peak RSS {base:.0f} MiB")
print(f"{'strategy':<20} {'peak RSS MiB':>13} {'ratio':>7} {'less baseline':>14} {'ratio':>7} {'tessel state MiB':>17} {'ratio':>7}")
for n in names:
    p, s = peak(n), state(n)
    print(f"{n:<20} {p:>13.0f} {p / ref:>7.3f} {p - base:>14.0f} {(p - base) / (ref - base):>7.3f} {s:>17.1f} {s / ref_state:>7.3f}")
PY
grep -h "profile: rank" "$work/optim_grads_params.log" | head -n "$ranks"
