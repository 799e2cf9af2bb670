#!/bin/sh
# Picks, by measurement, the OpenBLAS core type PyTorch (whose BLAS OpenBLAS is here) runs fastest
# with on this CPU: OpenBLAS 0.3.21 falls back to its SSE3 (Prescott) kernels on CPUs it does not
# know, e.g. the Intel Xeon of shared/MACHINE.md, where PyTorch then looks ~4x slower than it is.
# Each candidate — unset (OpenBLAS's own detection), Cooperlake, SkylakeX, Haswell — times a
# 1024³ sgemm through torch (bench/openblas_probe.py) in a fresh process with THREADS threads.
# The table goes to stderr; the last line on stdout is the fastest: an OPENBLAS_CORETYPE value,
# or "unset". Usage: bench/openblas_coretype.sh THREADS. BENCH_OPENBLAS_CANDIDATES replaces the
# candidates (train_throughput.sh --isa avx2: "Haswell Zen", the AVX2 kernels).
set -eu
threads=${1:-1}
probe="$(dirname "$0")/openblas_probe.py"
tcmalloc=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4
[ -e "$tcmalloc" ] && preload=$tcmalloc || preload=
best= best_rate=0
for candidate in ${BENCH_OPENBLAS_CANDIDATES:-unset Cooperlake SkylakeX Haswell}; do
  # A core type this CPU cannot run (SkylakeX's or Cooperlake's AVX-512 kernels on an AVX2-only
  # CPU) dies with SIGILL: it is skipped with a line, never ending the bench.
  if [ "$candidate" = unset ]; then
    set -- env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE
  else
    set -- env -u OPENBLAS_L2_SIZE OPENBLAS_CORETYPE="$candidate"
  fi
  status=0
  out=$("$@" LD_PRELOAD="$preload" OMP_NUM_THREADS="$threads" OPENBLAS_NUM_THREADS="$threads" \
    /usr/bin/python3 "$probe" "$threads" 2> /dev/null) 2> /dev/null || status=$?
  if [ "$status" != 0 ]; then
    echo "openblas_coretype: $candidate skipped: the probe failed (exit $status; 132 is SIGILL, an instruction this CPU lacks)" >&2
    continue
  fi
  core=${out% *} rate=${out##* }
  echo "openblas_coretype: $candidate -> $core kernels, sgemm 1024^3 $rate GFLOP/s ($threads thread(s))" >&2
  if awk "BEGIN {exit !($rate > $best_rate)}"; then best=$candidate best_rate=$rate; fi
done
[ -n "$best" ] || { echo "openblas_coretype: no core type ran" >&2; exit 1; }
echo "openblas_coretype: chosen $best ($best_rate GFLOP/s)" >&2
echo "$best"
