#!/usr/bin/env bash
# The main job: install, build, train the default model on the bundled corpus, then sample.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
build/tessel train --save-hf out/default-model "$@"
echo
echo "---- sample ----"
build/tessel generate --model out/default-model --prompt "And God said" --max-new-tokens 400
