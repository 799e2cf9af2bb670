#!/usr/bin/env bash
# Builds tessel as an AVX2-only CPU's native build compiles it, on any x86-64 machine, into
# build-avx2/: no -march=native (TESSEL_NATIVE=OFF), -mavx2 -mfma, no CUDA (its kernels are not
# the CPU's). For bench/train_throughput.sh --isa avx2 (every object, not only the kernels, as an
# AVX2 user's), and to check the native build's AVX2 twin of the kernels (TESSEL_CPU_ISA=avx2)
# against it: `scripts/build-avx2.sh tessel` builds the binary alone. Run with
# ONEDNN_MAX_CPU_ISA=AVX2 (or TESSEL_CPU_ISA=avx2, which caps oneDNN too) on an AVX-512 machine.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-avx2 -DCMAKE_BUILD_TYPE=Release -DTESSEL_NATIVE=OFF -DCMAKE_CXX_FLAGS="-mavx2 -mfma" \
      -DTESSEL_CUDA=OFF > /dev/null
cmake --build build-avx2 -j "$(nproc)" --target "${@:-all}"
