#!/usr/bin/env bash
# The GPU run, on one machine with a CUDA GPU (an H200 through the device tool: bench/README.md,
# "On a GPU"). Unpacks the bundle bench/gpu-pack.sh built here (.gpu/bundle.tar.xz) and runs,
# most important first, each step under a time limit and all of them under one deadline
# (GPU_DEADLINE seconds, default 540: one device-tool call of 10 minutes; a step gets what is
# left of it at most, and none once under 15 s are left):
#   1. the kernel harness on the CUDA table, fp32 and bf16 (every slot against the CPU
#      reference, the bf16 GEMMs against the CPU's emulation of the same rounding), the CUDA
#      twin tests, and the device communicators (NcclComm on one rank, StagedComm on two);
#   2. GPT-2 124M (T 1024, B 8) training with --bf16 on the GPU: tessel's tokens/s and MFU
#      against PyTorch's on the same machine (bench/pytorch_train.py: bf16 autocast, SDPA,
#      torch.compile);
#   3. one process against TP2 and DP2 as two ranks on the one GPU (StagedComm), --bf16;
#   4. the loss of 50 iterations of GPT-2 124M (T 1024, B 1) with --bf16 on the GPU against the
#      CPU fp32 run from the same initial weights on the same data;
#   5. cuda_bench beside PyTorch on the same kernel shapes (bench/gpu_reference.py);
#   6. on the CPU, bench/zero_bubble.sh with PP 4 on 4 of the machine's cores (a core per rank),
#      two rounds;
#   7. the CUDA tests under compute-sanitizer, if present.
# Writes $OUT/gpu-report.md (the summary) and the logs beside it (at most 8 files in all).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
report=$OUT/gpu-report.md
work=$(mktemp -d /tmp/tessel-gpu.XXXX)
TEST_FILTER=${GPU_TEST_FILTER:-*Kernel*:Bf16.*:Fp16.*}
DEADLINE=${GPU_DEADLINE:-540}

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
  local left=$((DEADLINE - SECONDS))
  if [ "$left" -lt 15 ]; then
    echo "- $name: SKIPPED (the ${DEADLINE} s deadline has come)" >> "$report"
    return 125
  fi
  [ "$seconds" -gt "$left" ] && seconds=$left
  local start=$SECONDS
  timeout "$seconds" "$@" >> "$log" 2>&1
  local rc=$?
  echo "- $name: exit $rc ($((SECONDS - start)) s)$([ $rc -eq 124 ] && echo ', TIMED OUT')" >> "$report"
  return $rc
}

echo "## 1. Tests" >> "$report"
step "kernel tests ($TEST_FILTER)" 90 "$OUT/tests.log" "$work/bin/tessel_tests" \
  --gtest_filter="$TEST_FILTER" --gtest_color=no
for ranks in 1 2; do
  step "device communicators, $ranks rank(s) on one GPU" 40 "$OUT/tests.log" "${mpirun[@]}" -n $ranks \
    "$work/bin/tessel_mpi_tests" --gtest_filter='DeviceComm.*' --gtest_color=no
done
# The totals and every failure; CUDA tests skipped here mean the device was not seen.
grep -h -E '^\[  (PASSED|FAILED)  \]|^\[  SKIPPED \] [0-9]+ test' "$OUT/tests.log" \
  2>/dev/null | sed 's/^/    /' >> "$report"
grep -q 'SKIPPED \] CudaKernels' "$OUT/tests.log" 2>/dev/null &&
  echo "- WARNING: CUDA kernel tests were skipped: no device was seen" >> "$report"

echo >> "$report"
echo "## 2. GPT-2 124M training speed, --bf16 (T 1024, B 8)" >> "$report"
corpus=data/kjv-genesis-esther.txt  # the bundled text's bytes, for both
gpt2=(--arch gpt2 --num-layers 12 --hidden-size 768 --num-attention-heads 12 --vocab-size 50304
      --seq-length 1024 --max-position-embeddings 1024 --data-path "$corpus" --seed 7 --lr 3e-4
      --min-lr 3e-5 --lr-warmup-iters 5 --lr-decay-style cosine --log-interval 1
      --hidden-dropout 0 --attention-dropout 0)  # as the PyTorch reference (and the CPU run) trains
tessel=("$work/bin/tessel" train)
step "tessel train --device cuda --bf16 (B 8, 30 iterations)" 150 "$OUT/train.log" \
  "${tessel[@]}" "${gpt2[@]}" --device cuda --bf16 --micro-batch-size 8 --global-batch-size 8 \
  --train-iters 30 --eval-iters 0 --log-json "$work/speed.jsonl"
step "PyTorch bf16 + torch.compile (B 8, 20 timed iterations)" 180 "$OUT/train.log" \
  bash -c "PYTHONUNBUFFERED=1 python3 bench/pytorch_train.py --device cuda --bf16 --compile \
    --vocab 50304 --seq 1024 --hidden 768 --layers 12 --heads 12 --batch 8 --iters 20 \
    --warmup 5 --data-path $corpus > '$work/pytorch.json'"

echo >> "$report"
echo "## 3. One process against TP2 and DP2 on this one GPU (StagedComm), --bf16" >> "$report"
small=(--arch gpt2 --num-layers 2 --hidden-size 64 --num-attention-heads 8 --ffn-hidden-size 128
       --seq-length 32 --global-batch-size 8 --micro-batch-size 2 --train-iters 10 --eval-iters 0 --lr 3e-3
       --data-path "$corpus" --seed 11 --log-interval 1 --device cuda --bf16 --hidden-dropout 0.1
       --attention-dropout 0)  # hidden dropout keyed by global coordinates; attention dropout is CPU-only
step "one process" 40 "$OUT/train.log" "${tessel[@]}" "${small[@]}" --log-json "$work/layout_1.jsonl"
step "TP2, two ranks on one GPU" 60 "$OUT/train.log" "${mpirun[@]}" -n 2 "${tessel[@]}" "${small[@]}" \
  --tp 2 --log-json "$work/layout_tp2.jsonl"
step "DP2, two ranks on one GPU" 60 "$OUT/train.log" "${mpirun[@]}" -n 2 "${tessel[@]}" "${small[@]}" \
  --log-json "$work/layout_dp2.jsonl"
echo >> "$report"
echo "## 4. Loss: --bf16 on the GPU against fp32 on the CPU (B 1, 50 iterations, same weights)" >> "$report"
step "tessel train --device cuda --bf16 (B 1)" 90 "$OUT/train.log" \
  "${tessel[@]}" "${gpt2[@]}" --device cuda --bf16 --micro-batch-size 1 --global-batch-size 1 \
  --train-iters 50 --eval-iters 0 --log-json "$work/loss_gpu.jsonl"
step "tessel train on the CPU, fp32, $(nproc) threads (B 1)" 200 "$OUT/train.log" \
  "${tessel[@]}" "${gpt2[@]}" --micro-batch-size 1 --global-batch-size 1 --train-iters 50 --eval-iters 0 \
  --threads "$(nproc)" --log-json "$work/loss_cpu.jsonl"

python3 bench/gpu_training_report.py "$work" >> "$report"
# The raw figures in one file (the device tool brings back 8 files at most).
(cd "$work" && tar -czf "$OUT/training-logs.tar.gz" ./*.jsonl ./pytorch.json 2>/dev/null)

echo >> "$report"
echo "## 5. Kernel speed (GPT-2 124M shapes, B 8, T 1024)" >> "$report"
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
echo "## 6. CPU: zero-bubble schedules with a core per rank (PP 4 on 4 ranks, the CPU build)" >> "$report"
# Issue 14's speed figures need more cores than the 2-core development machines have.
step "bench/zero_bubble.sh 2 4" 150 "$work/zero_bubble.log" env TESSEL="$work/bin/tessel" bash bench/zero_bubble.sh 2 4
grep -E '^(#|round|one process|ZB)' "$work/zero_bubble.log" 2>/dev/null | sed 's/^/    /' >> "$report"
cat "$work/zero_bubble.log" >> "$OUT/bench.log" 2>/dev/null

echo >> "$report"
echo "## 7. compute-sanitizer" >> "$report"
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

echo "report: $report"
cat "$report"
