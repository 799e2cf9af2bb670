#!/usr/bin/env bash
# Install, build, run the whole test suite but its slow tier (`cd build && ctest -L slow`), then
# on a CPU with AVX-512 the numerics-sensitive tests again as an AVX2-only CPU computes them
# (scripts/test-avx2.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-test-deps.sh
scripts/build.sh
scripts/install-test-references.sh build/test-references
(cd build && ctest --output-on-failure --timeout 600 -j 2 -LE slow)
scripts/test-avx2.sh
