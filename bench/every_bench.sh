#!/usr/bin/env bash
# Every bench in bench/ run to its summary with the fewest rounds, one after another, to show that
# each still runs on this CPU (issue 44: an AVX2-only CPU and an AVX-512 one alike) — not to
# measure: the figures of RESULTS.md come from each bench's own full run on a quiet machine.
#
#   bench/every_bench.sh [LOG_DIR]    (from the repository root, after scripts/build.sh and
#                                       scripts/install-test-references.sh build/test-references)
#
# Each bench runs under a time limit, its output kept in LOG_DIR/NAME.log (default
# /tmp/every_bench); the table at the end gives each one's exit status, seconds and last line.
# `--isa avx2` runs only where build-avx2/ is built (scripts/build-avx2.sh). Not run, with the
# reason printed: loaded_suite.sh (the whole suite twice, 20+ min), gpu.sh and gpu-pack.sh (a GPU
# machine; bench/README.md "On a GPU"). timeline_replay.py runs inside zero_bubble.sh,
# openblas_probe.py inside openblas_coretype.sh, pytorch_train.py inside run_pytorch.sh.
# Exit 1 when any bench fails.
set -uo pipefail
cd "$(dirname "$0")/.."
logs=${1:-/tmp/every_bench}
mkdir -p "$logs"
mpirun=(mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1)
rows=()
failed=0

run() {  # NAME LIMIT_SECONDS CMD...
  local name=$1 limit=$2
  shift 2
  local start rc last
  start=$(date +%s)
  echo "== $name: $*"
  timeout "$limit" "$@" > "$logs/$name.log" 2>&1
  rc=$?
  last=$(grep -v '^[[:space:]]*$' "$logs/$name.log" | tail -n 1 | cut -c1-100)
  rows+=("$(printf '%-28s %4s %6s  %s' "$name" "$rc" "$(( $(date +%s) - start ))" "$last")")
  [ "$rc" -eq 0 ] || { failed=1; echo "   failed (exit $rc): $logs/$name.log"; }
}

skip() {  # NAME WHY
  rows+=("$(printf '%-28s %4s %6s  %s' "$1" "-" "-" "not run: $2")")
}

run openblas_coretype 300 bench/openblas_coretype.sh 1
run train_throughput_tiny 900 bench/train_throughput.sh --rounds 1 --iters 5 --warmup 1 tiny 1
run train_throughput_gemm 900 bench/train_throughput.sh --gemm --rounds 1 small 1
for mode in dp torch tp buckets dpcost moe allreduce; do
  run "parallel_scaling_$mode" 900 bench/parallel_scaling.sh --rounds 1 --iters 3 --warmup 1 "$mode" tiny
done
run qwen3_next_throughput 900 bench/qwen3_next_throughput.sh --rounds 1 --iters 2 --warmup 1
run generate_throughput 900 bench/generate_throughput.sh build/tessel build/tessel --rounds 1
run hf_load_bench 900 bench/hf_load_bench.sh 2
run loader_bench 900 bench/loader_bench.sh --rounds 1 --iters 3
run preprocess_bench 900 env SYNTH_COPIES=2 bench/preprocess_bench.sh --rounds 1
run tokenizer_bench 900 bench/tokenizer_bench.sh --rounds 1
run zero_bubble 900 bench/zero_bubble.sh 1 2
run same_trajectory 900 bench/same_trajectory.sh build/tessel
run plan_same 900 bench/plan_same.sh build/tessel
run plan_published 900 bench/plan_published.sh
run plan_cpu 900 /usr/bin/python3 bench/plan_cpu.py --rounds 1 --iters 4 --layouts '^(DP2|TP2)$'  # four step times
run test_timeouts 900 /usr/bin/python3 bench/test_timeouts.py --run -R '^fault_bad_values$'  # a test that runs `timeout`
run gemm_bench 300 env OMP_NUM_THREADS=1 build/bench/gemm_bench --threads 1 --min-reps 1 --min-seconds 0.05
run bubble_bench 60 build/bench/bubble_bench
run plan_calibration_bench 900 build/bench/plan_calibration_bench
run gdn_bench 300 env OMP_NUM_THREADS=1 build/bench/gdn_bench --reps 2
run ckpt_bench 300 build/bench/ckpt_bench --num-layers 2 --hidden-size 256 --rounds 1 --dir "$logs/ckpt"
run cp_bench 300 "${mpirun[@]}" -n 2 build/bench/cp_bench
run allreduce_bench 300 "${mpirun[@]}" -n 2 build/bench/allreduce_bench
if [ -x build-avx2/tessel ] && [ -x build-avx2/bench/gemm_bench ]; then
  run train_throughput_avx2 900 bench/train_throughput.sh --isa avx2 --rounds 1 --iters 5 --warmup 1 tiny 1
else
  skip train_throughput_avx2 "build-avx2/ not built (scripts/build-avx2.sh)"
fi
skip loaded_suite "the whole suite twice (20+ min): bench/loaded_suite.sh"
skip gpu "needs a GPU machine: bench/gpu-pack.sh here, bench/gpu.sh there"

echo
echo "$(lscpu | sed -n 's/^Model name: *//p'), $(grep -qw avx512f /proc/cpuinfo && echo AVX-512 || echo 'AVX2, no AVX-512'), $(git rev-parse --short HEAD)"
printf '%-28s %4s %6s  %s\n' bench exit s "last line"
printf '%s\n' "${rows[@]}"
exit "$failed"
