#!/usr/bin/env bash
# The main job: install, build, train the default model on the bundled corpus with the seed's
# layout — TP 2 × PP 2 × DP 2 on 8 local ranks — then sample from it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
progress=()
[ -t 1 ] && progress=(--progress)
# 8 ranks share this machine's cores: one thread each; root needs --allow-run-as-root.
mpirun --allow-run-as-root --oversubscribe -n 8 -x OMP_NUM_THREADS=1 \
  build/tessel train --tp 2 --pp 2 --micro-batch-size 4 --save-hf out/default-model "${progress[@]}" "$@"
echo
echo "---- sample ----"
build/tessel generate --model out/default-model --prompt "And God said" --max-new-tokens 400
