#!/usr/bin/env bash
# The numerics an AVX2-only CPU computes, on a machine with AVX-512 (issue 43): the build uses
# -march=native and oneDNN picks its kernels by the CPU, so the order of fp32 sums, and in bf16
# which side of a rounding boundary a value lands, change with the machine. There the native
# build carries the CPU kernels' AVX2 twin (cmake/cpu_isa_twin.cmake), and TESSEL_CPU_ISA=avx2
# runs it with oneDNN capped at AVX2: the same bits as a build for an AVX2 CPU. This runs, in
# build/ and so computed, the tests whose tolerances sit nearest the rounding: the fast tier
# (every kernel against its reference, one equivalence case per axis), the MPI programs (CP
# attention on 2 and 4 ranks), the bf16 layouts and every CP layout. On a CPU without AVX-512
# the native build already computes as AVX2 does, and it says so and stops.
# `scripts/test-avx2.sh all` runs the whole suite but its slow tier instead.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! grep -qw avx512f /proc/cpuinfo; then
  echo "test-avx2: this CPU has no AVX-512: the native build already computes as AVX2 does"
  exit 0
fi
cd build
export TESSEL_CPU_ISA=avx2
if [ "${1:-}" = all ]; then
  ctest --output-on-failure --timeout 600 -j 2 -LE slow
else
  ctest --output-on-failure --timeout 600 -j 2 -L fast
  ctest --output-on-failure --timeout 600 -j 2 -LE fast -R 'Bf16|^mpi_tests_|cp[0-9]'
fi
