#!/usr/bin/env bash
# Imports run down the tree, never up: a file in src/tessel/<dir>/ includes only headers of its
# own directory or of the directories below it in this order (DESIGN.md's source tree).
# One grep reads the tree and one awk judges every include line: a process per line took a
# minute on a loaded machine.
set -eu
cd "$(dirname "$0")/../.."
order="core kernels comm parallel model family pipeline optim data ckpt plan infer train"
grep -rn --include=*.h --include=*.cpp --include=*.cu --include=*.cuh '#include "tessel/' src/tessel |
  awk -v order="$order" '
    BEGIN { n = split(order, dirs, " "); for (i = 1; i <= n; ++i) level[dirs[i]] = i }
    {
      file = $0; sub(/:.*/, "", file)
      split(file, parts, "/"); dir = parts[3]
      # The directory after the last `#include "tessel/`; the whole line when there is none.
      inc = $0
      if (match(inc, /.*#include "tessel\/[a-z_]+\//)) {
        inc = substr(inc, 1, RLENGTH - 1); sub(/.*\//, "", inc)
      }
      if (!(dir in level)) { print file ": directory " dir " is not in the layer order"; status = 1; next }
      if (!(inc in level)) { print file ": includes from unknown directory " inc; status = 1; next }
      if (level[inc] > level[dir]) {
        print file ": " dir " includes tessel/" inc "/ (up the layers: " order ")"; status = 1
      }
    }
    END { exit status }'
