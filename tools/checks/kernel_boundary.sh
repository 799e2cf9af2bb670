#!/usr/bin/env bash
# The kernel table is the only way to compute (DESIGN.md, kernels/kernels.h):
#  1. no file outside src/tessel/kernels/ names the CPU kernels (cpu::, kernels/cpu/ headers);
#  2. model/, parallel/, optim/ and train/ hold no compute over tensor elements: no OpenMP loops,
#     no raw memory copies or fills, no element-wise maths, no loop whose bound is an element
#     count (rows N, channels C, n, count, numel). Loops over layers, ranks, experts, blocks and
#     parameters are fine; element work is a named kernel. Maths on one reported number (a
#     perplexity in a log line) says so with a `// one scalar` comment.
set -uo pipefail
cd "$(dirname "$0")/../.."
status=0
report() {  # what, matches
  if [ -n "$2" ]; then
    echo "$1:"
    echo "$2"
    status=1
  fi
}
sources() { find "$@" \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) 2>/dev/null; }

outside=$(sources src apps bench tests | grep -v '^src/tessel/kernels/')
report "CPU kernels named outside src/tessel/kernels/ (call them through the kernel table)" \
  "$(grep -nE '\bcpu::|tessel/kernels/cpu/' $outside | grep -v '^tests/kernels/table_test.cpp')"

inside=$(sources src/tessel/model src/tessel/parallel src/tessel/optim src/tessel/train)
report "OpenMP loops (element work belongs in a kernel)" "$(grep -nE '#pragma omp' $inside)"
report "raw memory copies or fills (use the table's copy/zero or memory ops)" \
  "$(grep -nE '\b(memcpy|memset|memmove|std::copy_n|std::fill_n)\(' $inside)"
report "element-wise maths (exp, log, tanh: a kernel's work)" \
  "$(grep -nE 'std::(exp|expf|log|logf|tanh|log1p)\(' $inside | grep -v '// one scalar')"
report "loops over tensor elements (bounded by N, C, n, count, rows or numel)" \
  "$(grep -nE 'for \([^;]*;[^;]*(<|<=)[^;]*(\b(N|N_|N_l|N_l_|N_g|C|C_|n|count|rows|rows_in|rows_out)\b|numel\(\)|\* *C_?\b)[^;]*;' $inside)"
exit $status
