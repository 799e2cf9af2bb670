// The published runs the planner is checked against (`tessel plan --published`,
// bench/plan_published.sh); every row's source and configuration is in published_runs.cpp:
//   Korthikanti et al. 2022 (arXiv 2205.05198), Table 5: seconds per iteration, full
//   recomputation and SP + selective recomputation, 8 to 512 A100s.
//   Narayanan et al. 2021 (arXiv 2104.04473), Table 1 (ten models, 32 to 3072 A100s) and
//   Table 2 (PTD-P rows: 175B on PP 12 and 530B on PP 35, 384 to 2240 A100s): teraFLOP/s per GPU.
//   Llama 3 (arXiv 2407.21783), Table 4: the 405B model on 8192 and 16384 H100s.
//   Smith et al. 2022 (MT-NLG, arXiv 2201.11990), §2.4: seconds per iteration on DeepSpeed's
//   pipeline engine, reported beside the others and not fitted on (another framework).
// The efficiency model (Cluster's GEMM, memory and network efficiencies, one set for every GPU)
// is checked by leave-one-out: fitted on every row but one, it predicts the one left out.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <vector>

#include "tessel/plan/search.h"

namespace tessel {

// What a row publishes.
enum class PublishedFigure : uint8_t {
  Seconds,      // seconds per iteration
  PtdpTflops,   // teraFLOP/s per GPU, Narayanan et al.'s eq. 3 (recomputation's extra forward counted)
  ModelTflops,  // teraFLOP/s per GPU of model FLOPs (the planner's convention, kFlopConvention)
};

struct PublishedRun {
  std::string source;  // paper and table
  std::string name;    // the row
  std::string cluster = "a100-80gb";
  PlanModel model;
  PlanRun run;
  PublishedFigure figure = PublishedFigure::Seconds;
  double measured = 0;       // in the figure's unit
  bool calibration = false;  // one of the three rows the shipped presets' efficiencies are fitted on
  bool tune = false;         // micro batch and VPP not published: the planner picks the fastest
  std::vector<int> vpps = {1, 2, 3, 4, 5, 6, 8};  // the interleavings a tuned row may pick
  std::vector<int64_t> micro_batches = {1, 2, 4, 8};  // the micro batches a tuned row may pick
  bool lighter_ends = false;  // the first and last model chunks one layer short (Llama 3 405B)
  bool in_fit = true;        // false: reported beside the others, never fitted on (another framework)
  std::string note;
};

// Megatron-LM's run as both papers describe it: fp16 mixed precision, unfused attention.
PlanRun published_megatron_run(int tp, int pp, int vpp, int gpus, int64_t batch, int64_t micro, Recompute rc, bool sp);

std::vector<PublishedRun> korthikanti_table5();
std::vector<PublishedRun> narayanan_table1();
std::vector<PublishedRun> narayanan_table2();
std::vector<PublishedRun> llama3_table4();
std::vector<PublishedRun> mtnlg_runs();
// Every table above, in that order.
std::vector<PublishedRun> published_runs();

// The GEMM, memory and network efficiencies, applied to each row's own cluster preset.
struct Efficiency {
  double gemm = 0, memory = 0, network = 0;
};
Efficiency efficiency_of(const Cluster& c);
Cluster with_efficiency(const std::string& cluster, const Efficiency& e);

struct PublishedPrediction {
  PublishedRun row;
  Estimate estimate;   // of the layout predicted (for tuned rows, the fastest found)
  double predicted = 0;
  std::vector<MemoryFix> fixes;  // when it does not fit: what makes it fit
  double error() const { return predicted / row.measured - 1; }
};

// Teraflop/s per GPU as Narayanan et al. count it (eq. 3: 96·B·s·l·h²·(1 + s/6h + V/(16lh)),
// full recomputation's extra forward included).
double ptdp_tflops_per_gpu(const PlanModel& model, const PlanRun& run, double step_seconds);

// The row's published layout predicted with `e` on its cluster. A tuned row picks the fastest of
// its micro batches and interleavings that fits or misses by at most `margin` of the memory
// limit; a layout that does not fit is still the one predicted, with its verdict and fixes.
PublishedPrediction predict(const PublishedRun& row, const Efficiency& e, const TrainRules& rules, double margin = 0.05);

// The efficiencies that best fit `rows` (least squares of their relative errors), by
// Gauss–Newton in the inverse efficiencies (each ≤ 1) from `start`; tuned rows keep the layout
// they pick at `start` while fitting.
Efficiency fit_efficiency(const Efficiency& start, const std::vector<PublishedRun>& rows, const TrainRules& rules);

// Leave-one-out: for every row of `rows` that is fitted on, the efficiencies fitted on all the
// others and the prediction of it with them.
struct HeldOut {
  Efficiency fitted;
  PublishedPrediction prediction;
};
struct LeaveOneOut {
  Efficiency all_rows;          // fitted on every row
  std::vector<HeldOut> rows;    // one per row fitted on, in order
};
LeaveOneOut leave_one_out(const std::vector<PublishedRun>& rows, const Efficiency& start, const TrainRules& rules);

// Korthikanti et al. §4's activation memory against the planner's first stage, and the figures
// §5 states (published_memory.cpp); as JSON into `out` when `json`.
void print_activation_checks(const Cluster& cluster, bool json, nlohmann::json& out);

// Prints (or as JSON) every row's inputs, prediction, memory verdict and error, the
// leave-one-out distribution, the activation-memory check against Korthikanti et al.'s
// equations and the comparison with Megatron-LM's theoretical memory formula.
void print_published(bool json, const TrainRules& rules);

}  // namespace tessel
