#!/bin/sh
# Picks, by measurement, the OpenBLAS core type PyTorch (whose BLAS OpenBLAS is here) runs fastest
# with on this CPU: OpenBLAS 0.3.21 falls back to its SSE3 (Prescott) kernels on CPUs it does not
# know, e.g. the Intel Xeon of shared/MACHINE.md, where PyTorch then looks ~4x slower than it is.
# Each candidate — unset (OpenBLAS's own detection), Cooperlake, SkylakeX, Haswell — times a
# 1024³ sgemm through torch (bench/openblas_probe.py) in a fresh process with THREADS threads.
# The table goes to stderr; the last line on stdout is the fastest: an OPENBLAS_CORETYPE value,
# or "unset". Usage: bench/openblas_coretype.sh THREADS
set -eu
threads=${1:-1}
probe="$(dirname "$0")/openblas_probe.py"
tcmalloc=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4
[ -e "$tcmalloc" ] && preload=$tcmalloc || preload=
best= best_rate=0
for candidate in unset Cooperlake SkylakeX Haswell; do
  if [ "$candidate" = unset ]; then
    out=$(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE LD_PRELOAD="$preload" \
      OMP_NUM_THREADS="$threads" OPENBLAS_NUM_THREADS="$threads" /usr/bin/python3 "$probe" "$threads")
  else
    out=$(env -u OPENBLAS_L2_SIZE OPENBLAS_CORETYPE="$candidate" LD_PRELOAD="$preload" \
      OMP_NUM_THREADS="$threads" OPENBLAS_NUM_THREADS="$threads" /usr/bin/python3 "$probe" "$threads")
  fi
  core=${out% *} rate=${out##* }
  echo "openblas_coretype: $candidate -> $core kernels, sgemm 1024^3 $rate GFLOP/s ($threads thread(s))" >&2
  if awk "BEGIN {exit !($rate > $best_rate)}"; then best=$candidate best_rate=$rate; fi
done
echo "openblas_coretype: chosen $best ($best_rate GFLOP/s)" >&2
echo "$best"
