// Megatron-LM's own theoretical memory formula (megatron/training/theoretical_memory_usage.py:
// compute_weight_and_optimizer_memory and the two activation branches of
// report_theoretical_memory) beside the planner's first stage, with every difference named:
// each is a correction computed from the formula's own terms (what it leaves out or assumes),
// and the schedule's in-flight microbatches come from the generated schedule, which decides
// where the formula's count (L·(1 + (p−1)/(p·v)) or L·min(1, m/p)) disagrees with it.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <vector>

#include "tessel/plan/estimate.h"

namespace tessel {

// What the formula gives for the most loaded rank (the first pipeline stage), in bytes.
struct MegatronFormula {
  double weight_and_optimizer = 0;
  double activations = 0;
  bool sequence_parallel_branch = false;  // its SP + selective branch (Table 2's 34/t), else the other (10 + 24/t, × 1.05)
  double layer_microbatches = 0;          // the layers of one microbatch it counts in flight: L × its schedule factor
};
MegatronFormula megatron_theoretical_memory(const PlanModel& model, const PlanRun& run);

struct Correction {
  std::string cause;
  double bytes = 0;
};

struct FormulaComparison {
  std::string model, layout;
  MegatronFormula formula;
  double planner_state = 0, planner_activations = 0;  // the first stage: weights + gradients + optimizer; activations
  double schedule_layer_microbatches = 0;             // what the generated schedule holds at the first stage's peak
  std::vector<Correction> state, activations;         // formula + Σ corrections = the planner's figure
  double explained_state() const;
  double explained_activations() const;
};

// One layout (GPU clusters: the formula is Megatron's).
FormulaComparison compare_with_megatron(const PlanModel& model, const PlanRun& run, const Cluster& cluster);
// The layouts of the table (dense and MoE, VPP, SP, recompute, the distributed optimizer, CP,
// uneven stages, schedules holding fewer microbatches than the formula counts).
std::vector<FormulaComparison> megatron_comparisons(const TrainRules& rules);

void print_megatron_comparison(const TrainRules& rules);
nlohmann::json megatron_comparison_json(const TrainRules& rules);

}  // namespace tessel
