// tessel train's pictures of a real run: --pipeline-timeline FILE the last iteration's, --profile
// the iterations of Megatron's profiler window. Every rank's compute actions (F, B, I, W) and
// communication calls are gathered to the first rank, which writes them as an SVG picture (a
// FILE ending in .svg) or a Chrome trace (train/run_timeline.h). The gaps between the boxes are
// the bubble the end report's idle fraction sums, to set beside what `tessel schedule` simulates
// with the report's per-action costs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessel/parallel/groups.h"
#include "tessel/pipeline/executor.h"

namespace tessel {

// One iteration's pipeline statistics and communication calls on this rank.
struct TimedIteration {
  int64_t iteration = 0;
  PipelineExecutor::Stats stats;
  std::vector<ProcessGroups::GroupCall> calls;
};

// Gathers this rank's `iterations` (the same iteration numbers on every rank; its boxes and calls
// left out unless `shown`) to the first rank, which writes `path`; `flag` names it in errors and
// in the file. The ranks' clocks are aligned by the system clock, exact on one host. Collective over the
// world; a file that cannot be written fails on every rank.
void write_pipeline_timeline(const std::string& path, const std::string& flag,
                             const std::vector<TimedIteration>& iterations, bool shown, ProcessGroups& groups);

}  // namespace tessel
