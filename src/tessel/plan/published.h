// The published Megatron-LM runs the planner is checked against (`tessel plan --published`,
// bench/plan_published.sh):
//   Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models"
//   (arXiv 2205.05198): Table 3's four configurations and Table 5's iteration times, with full
//   recomputation and with sequence parallelism + selective recomputation; and the activation
//   memory of §4 (Table 2, eq. 5) with the figures its text states.
//   Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
//   Megatron-LM" (arXiv 2104.04473): Table 1's ten models, achieved teraFLOP/s per GPU.
// The efficiency model (Cluster's gemm, memory and network efficiencies) is fitted on three
// rows of Table 5 and then predicts every row of both tables unchanged.
#pragma once

#include <string>
#include <vector>

#include "tessel/plan/estimate.h"

namespace tessel {

struct PublishedRun {
  std::string source;  // paper and table
  std::string name;    // the row
  PlanModel model;
  PlanRun run;
  double measured = 0;       // Table 5: seconds per iteration; Table 1: teraFLOP/s per GPU
  bool calibration = false;  // one of the rows the efficiency model is fitted on
  bool tune = false;         // micro batch and VPP not published: the planner picks the fastest
};

std::vector<PublishedRun> korthikanti_table5();
std::vector<PublishedRun> narayanan_table1();

struct PublishedPrediction {
  PublishedRun row;
  Estimate estimate;   // of the layout predicted (for tuned rows, the fastest found)
  double predicted = 0;
  double error() const { return predicted / row.measured - 1; }
};

// Teraflop/s per GPU as Narayanan et al. count it (eq. 3: 96·B·s·l·h²·(1 + s/6h + V/(16lh)),
// full recomputation's extra forward included).
double ptdp_tflops_per_gpu(const PlanModel& model, const PlanRun& run, double step_seconds);

PublishedPrediction predict(const PublishedRun& row, const Cluster& cluster, const TrainRules& rules);

// The efficiencies that best fit the calibration rows (least squares of their relative errors),
// by coordinate search from `start`.
Cluster fit_efficiency(const Cluster& start, const std::vector<PublishedRun>& rows, const TrainRules& rules);

// Prints (or as JSON) every row's inputs, prediction and error, the summary statistics, and the
// activation-memory check against Korthikanti et al.'s equations and stated figures.
void print_published(bool json, const TrainRules& rules);

}  // namespace tessel
