#!/usr/bin/env bash
# The kernel table is the only way to compute (DESIGN.md, kernels/kernels.h):
#  1. no file outside src/tessel/kernels/ names the CPU kernels (cpu::, kernels/cpu/ headers);
#  2. model/, parallel/, optim/ and train/ hold no compute over tensor elements: no OpenMP loops,
#     no raw memory copies or fills, no element-wise maths, no loop whose bound is an element
#     count (rows N, channels C, n, count, numel). Loops over layers, ranks, experts, blocks and
#     parameters are fine; element work is a named kernel. Maths on one reported number (a
#     perplexity in a log line) says so with a `// one scalar` comment.
# One Python pass reads each file once and tries every rule on its lines (grep's regular
# expressions, word boundaries included); violations print as grep -n prints them, by rule.
# Debian's python3, as tests/train/crosscheck.sh: a pyenv shim on the PATH takes seconds to start.
cd "$(dirname "$0")/../.."
exec /usr/bin/python3 - <<'EOF'
import os
import re
import sys

SOURCE_SUFFIXES = (b".h", b".cpp", b".cu", b".cuh")
COMPUTE_DIRS = tuple(b"src/tessel/" + d + b"/" for d in (b"model", b"parallel", b"optim", b"train"))
# (what, applies to a file, a line that breaks the rule, a line the rule lets pass)
RULES = [
    ("CPU kernels named outside src/tessel/kernels/ (call them through the kernel table)",
     lambda f: not f.startswith(b"src/tessel/kernels/") and f != b"tests/kernels/table_test.cpp",
     re.compile(rb"\bcpu::|tessel/kernels/cpu/"), None),
    ("OpenMP loops (element work belongs in a kernel)",
     lambda f: f.startswith(COMPUTE_DIRS), re.compile(rb"#pragma omp"), None),
    ("raw memory copies or fills (use the table's copy/zero or memory ops)",
     lambda f: f.startswith(COMPUTE_DIRS),
     re.compile(rb"\b(memcpy|memset|memmove|std::copy_n|std::fill_n)\("), None),
    ("element-wise maths (exp, log, tanh: a kernel's work)",
     lambda f: f.startswith(COMPUTE_DIRS), re.compile(rb"std::(exp|expf|log|logf|tanh|log1p)\("),
     re.compile(rb"// one scalar")),
    ("loops over tensor elements (bounded by N, C, n, count, rows or numel)",
     lambda f: f.startswith(COMPUTE_DIRS),
     re.compile(rb"for \([^;]*;[^;]*(<|<=)[^;]*(\b(N|N_|N_l|N_l_|N_g|C|C_|n|count|rows|rows_in|rows_out)\b"
                rb"|numel\(\)|\* *C_?\b)[^;]*;"), None),
]

files = sorted(os.path.join(root, name).encode()
               for top in ("src", "apps", "bench", "tests")
               for root, _, names in os.walk(top) for name in names
               if name.encode().endswith(SOURCE_SUFFIXES))
found = [[] for _ in RULES]
for path in files:
    rules = [(i, rule) for i, rule in enumerate(RULES) if rule[1](path)]
    if not rules:
        continue
    with open(path, "rb") as f:
        for number, line in enumerate(f.read().split(b"\n"), 1):
            for i, (_, _, bad, allowed) in rules:
                if bad.search(line) and not (allowed and allowed.search(line)):
                    found[i].append(b"%s:%d:%s" % (path, number, line))
out = sys.stdout.buffer
for (what, _, _, _), lines in zip(RULES, found):
    if lines:
        out.write(what.encode() + b":\n" + b"\n".join(lines) + b"\n")
sys.exit(1 if any(found) else 0)
EOF
