// The search: every layout of a model on a GPU count for a global batch — TP, CP, PP, VPP with
// uneven first and last stages where the layers do not divide, EP and ETP, the micro batch,
// recomputation and the distributed optimizer (DP follows) — checked against tessel's rules and
// the memory, then ranked by step time. The top layouts are simulated in order of a lower bound
// on their step time (the busiest stage's work), so the ranking is exact without simulating
// layouts that cannot reach it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tessel/plan/estimate.h"

namespace tessel {

// Dimensions the user fixed (flags given); the rest are searched.
struct SearchSpace {
  std::optional<int> tp, cp, pp, vpp, ep, etp;
  std::optional<int64_t> micro_batch;
  std::optional<Recompute> recompute;
  std::optional<bool> distributed_optimizer;
  int top = 10;  // how many to rank
  // Layouts over the memory limit by at most this fraction of it are near misses: listed after
  // the ranking with their margin and the changes that make them fit (--memory-margin).
  double memory_margin = 0.05;
};

// One change that brings a layout under the memory limit: what to pass, the changed run, its
// peak, and its step time (0 until estimated).
struct MemoryFix {
  std::string change;  // e.g. "--recompute-granularity full"
  PlanRun run;
  double peak_gib = 0;
  double step = 0;
};

// No schedule of `run` is faster than its busiest stage's work: the search simulates layouts in
// the order of this bound and stops where it cannot beat the slowest kept.
double step_lower_bound(const PlanModel& model, const PlanRun& run, const Cluster& cluster);

// The changes of one step each that make `run` fit, tried in this order: recompute one more
// module (selective, or full where selective is not enough), the distributed optimizer, half the micro batch (twice the
// microbatches, each in flight half the size), and the runtime allowance it would need. Each
// change keeps every training rule; `with_time` estimates each fix's step time too.
std::vector<MemoryFix> memory_fixes(const PlanModel& model, const PlanRun& run, const Cluster& cluster,
                                    const TrainRules& rules, bool with_time);
// The runtime allowance per rank under which `stages` would fit (negative: none would do).
double runtime_allowance_to_fit(const std::vector<StageMemory>& stages, double limit_gib);

struct NearMiss {
  Estimate estimate;            // the layout as given: its step time and its verdict
  std::vector<MemoryFix> fixes;
};

struct Rejection {
  PlanRun run;
  std::vector<std::string> reasons;  // every rule it breaks, or its memory against the limit
};

struct SearchResult {
  std::vector<Estimate> ranked;       // the best `top`, fastest first
  std::vector<Rejection> rejected;
  std::vector<NearMiss> near_misses;  // over by at most the margin, the fastest `top`, fastest first
  double memory_margin = 0;
  int considered = 0;                 // layouts enumerated
  int valid = 0;                      // of those, passing every rule and fitting in memory
  int simulated = 0;                  // of those, simulated (the others' bound was too slow)
};

// `base` carries what is not searched: the GPU count (parallel.world), global batch, precision,
// attention backend, schedule and order.
SearchResult search(const PlanModel& model, const PlanRun& base, const SearchSpace& space, const Cluster& cluster,
                    const TrainRules& rules);

// The --pipeline-model-parallel-layout that gives the first and last model chunks the fewest
// layers when `layers` do not divide into `chunks` (the embedding and the LM head sit there):
// e.g. 60 layers over 8 chunks, "Et*6|t*8|t*8|t*8|t*8|t*8|t*8|t*6L"; the first chunk gives up
// `first_share` of the missing layers (-1: half), the last the rest, and holds the model's
// `mtp_layers` MTP layers ('m'). Empty when they divide or no such split exists.
std::string lighter_ends_layout(int layers, int chunks, int first_share = -1, int mtp_layers = 0);

}  // namespace tessel
