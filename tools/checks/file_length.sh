#!/usr/bin/env bash
# No source file over 500 lines: a file a reader can hold in one sitting.
set -uo pipefail
cd "$(dirname "$0")/../.."
long=$(git ls-files -co --exclude-standard -- '*.h' '*.cpp' '*.cu' '*.cuh' '*.py' '*.sh' '*.js' '*.mjs' |
       while read -r f; do [ -f "$f" ] && n=$(wc -l < "$f") && [ "$n" -gt 500 ] && echo "$f: $n lines"; done)
if [ -n "$long" ]; then
  echo "source files over 500 lines:"
  echo "$long"
  exit 1
fi
