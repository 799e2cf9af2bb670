#!/usr/bin/env bash
# Same plans, line for line: runs `tessel plan` with each of two binaries — e.g. one built from the
# commit before a change to the planner — on every layout of bench/plan_cpu.py (as --json and as
# --explain, on a fixed CPU cluster written here, so both read the same rates and no calibration
# noise enters), a search on that cluster with its two drawings, and GPU-cluster invocations
# (layouts, --explain, a search with drawings, a Qwen3-Next preset, --published), then diffs each
# output and each drawing.
#
#   bench/plan_same.sh BASE_TESSEL [NEW_TESSEL]   (NEW_TESSEL: build/tessel)
#
# Prints one line per invocation, the diff of any that differs, and exits non-zero if any does.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
base=$(realpath "${1:?usage: plan_same.sh BASE_TESSEL [NEW_TESSEL]}")
new=$(realpath "${2:-$root/build/tessel}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# A CPU machine with fixed rates (the keys --calibrate writes).
cat > "$work/cpu.json" <<'JSON'
{"name": "fixed-cpu", "device": "cpu", "devices_per_node": 8, "memory_gib": 4, "peak_flops": 5e10,
 "memory_bandwidth": 1e10, "intra_bandwidth": 5e9, "intra_latency": 2e-6, "inter_bandwidth": 1e9,
 "inter_latency": 1e-5, "gemm_efficiency": 0.8, "memory_efficiency": 0.7, "network_efficiency": 0.6,
 "runtime_memory_gib": 0.05}
JSON

invocations=()
while IFS='|' read -r ranks flags; do
  invocations+=("--cluster $work/cpu.json --num-gpus $ranks $flags --json"
                "--cluster $work/cpu.json --num-gpus $ranks $flags --explain")
done < <(cd "$root/bench" && python3 -c 'import plan_cpu
for layout in plan_cpu.LAYOUTS: print(f"{layout[1]}|{layout[2]}")')
qwen_next="--model qwen3-next-80b-a3b --seq-length 512"
invocations+=(
  "--cluster $work/cpu.json --num-gpus 8 --global-batch-size 16 --top 5 --svg-memory SVG/m.svg --svg-time SVG/t.svg"
  "--cluster $work/cpu.json --num-gpus 8 --num-layers 8 --hidden-size 256 --global-batch-size 16 --all-rejected"
  "--cluster $work/cpu.json --num-gpus 4 $qwen_next --num-layers 4 --tp 2 --pp 2 --sequence-parallel --micro-batch-size 1 --global-batch-size 8 --explain"
  "--model llama3-8b --cluster h100 --num-gpus 8 --tp 2 --micro-batch-size 1 --global-batch-size 32 --explain"
  "--model llama3-8b --cluster h100 --num-gpus 16 --global-batch-size 64 --top 3 --svg-memory SVG/m.svg --svg-time SVG/t.svg"
  "--model gpt3-175b --cluster a100-80gb --num-gpus 64 --tp 8 --pp 8 --vpp 3 --sequence-parallel --recompute-granularity selective --micro-batch-size 1 --global-batch-size 64 --json"
  "--model qwen3.5-397b-a17b --cluster h100 --num-gpus 64 --tp 4 --pp 8 --ep 8 --sequence-parallel --use-distributed-optimizer --micro-batch-size 1 --global-batch-size 512 --recompute-granularity selective --explain"
  "--model qwen3-next-80b-a3b --cluster h100 --num-gpus 16 --tp 2 --pp 2 --ep 4 --sequence-parallel --micro-batch-size 1 --global-batch-size 64 --recompute-granularity full"
  "--model deepseek-v3 --cluster h200 --num-gpus 256 --tp 2 --pp 8 --ep 16 --sequence-parallel --use-distributed-optimizer --micro-batch-size 1 --global-batch-size 1024"
  "--published"
)

differ=0
for i in "${!invocations[@]}"; do
  args=${invocations[$i]}
  for side in base new; do
    mkdir -p "$work/$side/SVG"
    binary=$base; [ "$side" = new ] && binary=$new
    # shellcheck disable=SC2086  # the flags are words
    (cd "$work/$side" && "$binary" plan ${args//SVG\//$work/$side/SVG/} > "out.$i" 2>&1 || echo "exit $?" >> "out.$i")
    sed -i "s|$work/$side|WORK|g" "$work/$side/out.$i"
  done
  if diff -q "$work/base/out.$i" "$work/new/out.$i" > /dev/null && diff -qr "$work/base/SVG" "$work/new/SVG" > /dev/null; then
    echo "same  $args"
  else
    echo "DIFF  $args"
    diff "$work/base/out.$i" "$work/new/out.$i" || true
    diff -r "$work/base/SVG" "$work/new/SVG" || true
    differ=1
  fi
  rm -f "$work"/base/SVG/* "$work"/new/SVG/*
done
exit $differ
