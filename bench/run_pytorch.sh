#!/bin/sh
# Runs bench/pytorch_train.py with the setting PyTorch 1.13 (Debian) is fastest with on this
# machine (bench/README.md): tcmalloc, OpenBLAS's fastest core type on this CPU, thread pools
# sized before torch loads, passive OpenMP waiting when two threads share the two cores.
# The core type is BENCH_OPENBLAS_CORETYPE when set (a value bench/openblas_coretype.sh printed,
# so that a script alternating many runs measures once), else measured now.
# Usage: bench/run_pytorch.sh --threads 1 [pytorch_train.py flags...]
# BENCH_PYTORCH_SCRIPT runs another trainer in the same setting (tools/crosscheck/qwen3_next_reference.py).
set -eu
threads=1
prev=
for arg in "$@"; do
  case $arg in --threads=*) threads=${arg#--threads=} ;; esac
  if [ "$prev" = "--threads" ]; then threads=$arg; fi
  prev=$arg
done

tcmalloc=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4
if [ ! -e "$tcmalloc" ]; then
  echo "run_pytorch.sh: $tcmalloc not found (apt-get install libtcmalloc-minimal4)" >&2
  exit 1
fi

coretype=${BENCH_OPENBLAS_CORETYPE:-$("$(dirname "$0")/openblas_coretype.sh" "$threads")}
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
if [ "$coretype" != unset ]; then export OPENBLAS_CORETYPE="$coretype"; fi
export LD_PRELOAD=$tcmalloc
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
if [ "$threads" -gt 1 ]; then export OMP_WAIT_POLICY=PASSIVE; fi
exec /usr/bin/python3 "${BENCH_PYTORCH_SCRIPT:-$(dirname "$0")/pytorch_train.py}" "$@"
