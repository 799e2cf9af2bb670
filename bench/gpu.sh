#!/usr/bin/env bash
# The GPU run, on one machine with a CUDA GPU (an H200 through the device tool: bench/README.md,
# "On a GPU"). Unpacks the bundle bench/gpu-pack.sh built here (.gpu/bundle.tar.xz) and, each
# step with a time limit so the whole stays within a few minutes:
#   1. the kernel tests with the CUDA table listed (every CUDA slot against the CPU reference),
#      and the device communicators: NcclComm on one rank, StagedComm with two ranks on one GPU;
#   2. cuda_bench (GEMM, attention TFLOP/s, memory-bound GB/s on GPT-2 124M shapes) beside
#      PyTorch on the same shapes (bench/gpu_reference.py), with ratios;
#   3. the CUDA tests under compute-sanitizer (out-of-bounds accesses, races), if present;
#   4. TODO(trainer): the training benchmark against PyTorch and the MFU figure.
# The limits add up to under 9 minutes, inside one device-tool call of 10.
# Writes $OUT/gpu-report.md (the summary) and the logs beside it (at most 8 files in all).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
report=$OUT/gpu-report.md
work=$(mktemp -d /tmp/tessel-gpu.XXXX)
TEST_FILTER=${GPU_TEST_FILTER:-*Kernel*}

[ -f .gpu/bundle.tar.xz ] || { echo "gpu.sh: no .gpu/bundle.tar.xz: run bench/gpu-pack.sh here and carry .gpu" >&2; exit 2; }
tar -C "$work" -xJf .gpu/bundle.tar.xz

# The image's CUDA libraries (cuBLASLt, NCCL): the toolkit's, else PyTorch's wheels.
cuda_dirs=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, q, "lib") for p in nvidia.__path__ for q in os.listdir(p)))' 2>/dev/null); do
  [ -d "$d" ] && cuda_dirs="$cuda_dirs:$d"
done
export LD_LIBRARY_PATH="$work/lib$cuda_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if ! "$work/bin/cuda_bench" --help > /dev/null 2> "$work/load.err"; then
  export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$work/lib/fallback"  # the image's libstdc++ is older
fi
export OPAL_PREFIX="$work/root/usr" PATH="$work/root/usr/bin:$PATH"
export PMIX_MCA_mca_base_component_path="$work/root/usr/lib/x86_64-linux-gnu/pmix2/lib/pmix"
export OMPI_MCA_mca_base_component_path="$work/root/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3"
mpirun=(mpirun --allow-run-as-root --oversubscribe -x LD_LIBRARY_PATH -x OPAL_PREFIX
        -x PMIX_MCA_mca_base_component_path -x OMPI_MCA_mca_base_component_path)

{
  echo "# tessel GPU run"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); bundle built from commit $(cat .gpu/commit 2>/dev/null || echo '?'), tree at $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "- GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv,noheader 2>&1 | head -1)"
  echo "- CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "- CUDA libraries from: ${cuda_dirs#:}"
  ldd "$work/bin/tessel_tests" | grep -E 'not found' | sed 's/^/- MISSING: /'
  echo
} > "$report"

step() {  # step NAME SECONDS LOG command...: runs it, notes its exit status in the report
  local name=$1 seconds=$2 log=$3
  shift 3
  local start=$SECONDS
  timeout "$seconds" "$@" >> "$log" 2>&1
  local rc=$?
  echo "- $name: exit $rc ($((SECONDS - start)) s)$([ $rc -eq 124 ] && echo ', TIMED OUT')" >> "$report"
  return $rc
}

echo "## 1. Tests" >> "$report"
step "kernel tests ($TEST_FILTER)" 90 "$OUT/tests.log" "$work/bin/tessel_tests" \
  --gtest_filter="$TEST_FILTER" --gtest_output="xml:$OUT/tests.xml" --gtest_color=no
for ranks in 1 2; do
  step "device communicators, $ranks rank(s) on one GPU" 40 "$OUT/comm.log" "${mpirun[@]}" -n $ranks \
    "$work/bin/tessel_mpi_tests" --gtest_filter='DeviceComm.*' --gtest_color=no
done
# The totals and every failure; CUDA tests skipped here mean the device was not seen.
grep -h -E '^\[  (PASSED|FAILED)  \]|^\[  SKIPPED \] [0-9]+ test' "$OUT/tests.log" "$OUT/comm.log" \
  2>/dev/null | sed 's/^/    /' >> "$report"
grep -q 'SKIPPED \] CudaKernels' "$OUT/tests.log" 2>/dev/null &&
  echo "- WARNING: CUDA kernel tests were skipped: no device was seen" >> "$report"

echo >> "$report"
echo "## 2. Kernel speed (GPT-2 124M shapes, B 8, T 1024)" >> "$report"
step "cuda_bench" 90 "$OUT/bench.log" "$work/bin/cuda_bench" --json "$OUT/cuda_bench.jsonl"
step "PyTorch reference (bench/gpu_reference.py)" 90 "$OUT/bench.log" \
  bash -c "PYTHONUNBUFFERED=1 python3 bench/gpu_reference.py > '$OUT/pytorch_reference.jsonl'"
python3 - "$OUT/cuda_bench.jsonl" "$OUT/pytorch_reference.jsonl" >> "$report" << 'PY'
import json, sys
def load(path):
    try:
        return [json.loads(l) for l in open(path) if l.strip()]
    except OSError:
        return []
ours, ref = load(sys.argv[1]), load(sys.argv[2])
by_name = {(r["group"], r["name"]): r for r in ref}
print("\n| kernel | tessel fp32 ms | rate | PyTorch fp32 | PyTorch bf16 | tessel / PyTorch fp32 |")
print("| --- | --- | --- | --- | --- | --- |")
for r in ours:
    f32, b16 = by_name.get((r["group"], r["name"] + " fp32")), by_name.get((r["group"], r["name"] + " bf16"))
    cell = lambda x: f'{x["rate"]:.1f} {x["unit"]} ({x["ms"]:.3f} ms)' if x else "–"
    ratio = f'{f32["ms"] / r["ms"]:.2f}× speed' if f32 else "–"
    print(f'| {r["group"]} {r["name"]} | {r["ms"]:.3f} | {r["rate"]:.1f} {r["unit"]} | {cell(f32)} | {cell(b16)} | {ratio} |')
PY

echo >> "$report"
echo "## 3. compute-sanitizer" >> "$report"
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2> /dev/null)
if [ -n "$sanitizer" ]; then
  step "compute-sanitizer memcheck (CudaKernels.*)" 120 "$OUT/sanitizer.log" "$sanitizer" \
    --tool memcheck --error-exitcode 9 "$work/bin/tessel_tests" --gtest_filter='CudaKernels.*'
  step "compute-sanitizer racecheck (attention, moe slots, norms)" 60 "$OUT/sanitizer.log" "$sanitizer" \
    --tool racecheck --error-exitcode 9 "$work/bin/tessel_tests" \
    --gtest_filter='CudaKernels.Attention*:CudaKernels.CapacityDrop*:CudaKernels.Norms'
else
  echo "- not on this machine" >> "$report"
fi

cat >> "$report" << 'EOF2'

## 4. Training (TODO)
- TODO(trainer): GPT-2 124M, T 1024, bf16 training tokens/s and MFU (model FLOPs over the 989
  TFLOP/s bf16 dense peak) against bench/pytorch_train.py with torch.compile on this GPU, and the
  loss of 50 iterations against the CPU fp32 run — needs `tessel train` on the CUDA table (the
  trainer rewrite) and --bf16. Hook: run `tessel train` on the CUDA table here (the flag the rewrite
  adds) and add its --log-json to this report.
- TODO(trainer): one process against TP2 and DP2 as two ranks on this GPU (StagedComm), once
  ProcessGroups takes make_comm (comm/device_comm.h).
EOF2
echo "report: $report"
cat "$report"
