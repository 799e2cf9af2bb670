#!/usr/bin/env bash
# Install, build, run the whole test suite but its slow tier (`cd build && ctest -L slow`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-test-deps.sh
scripts/build.sh
scripts/install-test-references.sh build/test-references
cd build
ctest --output-on-failure --timeout 600 -j 2 -LE slow
