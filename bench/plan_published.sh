#!/usr/bin/env bash
# The planner against published runs, as tables for bench/RESULTS.md (the one script that reports
# the leave-one-out accuracy: every row predicted with the efficiencies fitted on all the others):
#   Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
#   arXiv 2205.05198: Table 3 (configurations), §6 (interleaving 3 for 175B and 530B), Table 5
#   (iteration seconds), §4 (activation memory: Table 2, eq. 5); Figure 1 has no printed values.
#   Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
#   Megatron-LM", arXiv 2104.04473: Table 1 (sizes, TP, PP, GPUs, batch, teraFLOP/s per GPU) and
#   Table 2 (the PTD-P rows: 175B on PP 12, 530B on PP 35, 384 to 2240 GPUs).
#   Llama 3, arXiv 2407.21783, Table 4 (405B on 8192 and 16384 H100s, TP 8, PP 16).
#   Smith et al. 2022 (MT-NLG), arXiv 2201.11990, §2.4 (DeepSpeed's pipeline: reported, not fitted).
#   Megatron-LM's megatron/training/theoretical_memory_usage.py: its formula beside the planner.
# The numbers were read from the sources (src/tessel/plan/published_runs.cpp lists them).
#   bench/plan_published.sh [--triples]   (--triples: also every choice of three calibration rows)
set -euo pipefail
TESSEL=${TESSEL:-build/tessel}
"$TESSEL" plan --published
if [ "${1:-}" = "--triples" ]; then
  echo
  "${CALIBRATION_BENCH:-build/bench/plan_calibration_bench}"
fi
