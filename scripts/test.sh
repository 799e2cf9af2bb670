#!/usr/bin/env bash
# Install, build, run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-test-deps.sh
scripts/build.sh
cd build
ctest --output-on-failure --timeout 600 -j 2
