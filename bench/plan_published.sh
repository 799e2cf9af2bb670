#!/usr/bin/env bash
# The planner against published Megatron-LM runs, as tables for bench/RESULTS.md:
#   Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
#   arXiv 2205.05198: Table 3 (configurations), §6 (interleaving 3 for 175B and 530B), Table 5
#   (iteration seconds), §4 (activation memory: Table 2, eq. 5); Figure 1 has no printed values.
#   Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
#   Megatron-LM", arXiv 2104.04473: Table 1 (sizes, TP, PP, GPUs, batch, teraFLOP/s per GPU).
# The numbers were read from the papers' text (src/tessel/plan/published.cpp lists them).
#   bench/plan_published.sh [--triples]   (--triples: also every choice of three calibration rows)
set -euo pipefail
TESSEL=${TESSEL:-build/tessel}
"$TESSEL" plan --published
if [ "${1:-}" = "--triples" ]; then
  echo
  "${CALIBRATION_BENCH:-build/bench/plan_calibration_bench}"
fi
