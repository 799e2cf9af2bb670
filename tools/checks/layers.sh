#!/usr/bin/env bash
# Imports run down the tree, never up: a file in src/tessel/<dir>/ includes only headers of its
# own directory or of the directories below it in this order (DESIGN.md's source tree).
set -euo pipefail
cd "$(dirname "$0")/../.."
order=(core kernels comm parallel model pipeline optim data ckpt plan infer train)
declare -A level
for i in "${!order[@]}"; do level[${order[$i]}]=$i; done
status=0
while IFS= read -r line; do
  file=${line%%:*}
  dir=$(echo "$file" | cut -d/ -f3)
  inc=$(echo "$line" | sed -E 's/.*#include "tessel\/([a-z_]+)\/.*/\1/')
  [ -n "${level[$dir]:-}" ] || { echo "$file: directory $dir is not in the layer order"; status=1; continue; }
  [ -n "${level[$inc]:-}" ] || { echo "$file: includes from unknown directory $inc"; status=1; continue; }
  if [ "${level[$inc]}" -gt "${level[$dir]}" ]; then
    echo "$file: $dir includes tessel/$inc/ (up the layers: ${order[*]})"
    status=1
  fi
done < <(grep -rn --include=*.h --include=*.cpp --include=*.cu --include=*.cuh '#include "tessel/' src/tessel)
exit $status
