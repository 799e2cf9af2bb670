#!/usr/bin/env bash
# Configures and builds Release into build/ (the plain CMake path, nothing more). A new build/ is
# configured for Ninja, which keeps both cores compiling where Make's recursive jobs wait on each
# other; a build/ configured before keeps its generator (CMake refuses to switch it).
set -euo pipefail
cd "$(dirname "$0")/.."
generator=()
[ -f build/CMakeCache.txt ] || generator=(-G Ninja)
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build -j "$(nproc)"
