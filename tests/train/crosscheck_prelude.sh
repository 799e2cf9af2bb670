# Sourced by the PyTorch cross-checks (crosscheck.sh, crosscheck_qwen3_next.sh) with their
# arguments TESSEL SRC: sets tessel, src, python (Debian's, which has python3-torch) and work (a
# temporary folder removed on exit); ends the script when PyTorch is missing.
set -euo pipefail
tessel=$1
src=$2
python=/usr/bin/python3
if ! "$python" -c "import torch" 2>/dev/null; then
  echo "PyTorch not found for $python: install it with scripts/install-test-deps.sh"
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
