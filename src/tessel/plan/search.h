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
};

struct Rejection {
  PlanRun run;
  std::vector<std::string> reasons;  // every rule it breaks, or its memory against the limit
};

struct SearchResult {
  std::vector<Estimate> ranked;       // the best `top`, fastest first
  std::vector<Rejection> rejected;
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
// `first_share` of the missing layers (-1: half), the last the rest. Empty when they divide or
// no such split exists.
std::string lighter_ends_layout(int layers, int chunks, int first_share = -1);

}  // namespace tessel
