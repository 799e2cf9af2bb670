// tessel train --pipeline-timeline FILE: the last iteration's compute actions on every rank as a
// Chrome trace (chrome://tracing, ui.perfetto.dev): a row per rank, a box per F, B, I and W named
// by its microbatch (and model chunk), at the time it ran. The gaps between the boxes are the
// bubble the end report's idle fraction sums, to set beside what `tessel schedule` simulates
// with the report's per-action costs.
#pragma once

#include <string>

#include "tessel/parallel/groups.h"
#include "tessel/pipeline/executor.h"

namespace tessel {

// Gathers `last` (this rank's pipeline statistics of iteration `iteration`) to the first rank,
// which writes `path`. The ranks' clocks are aligned by the system clock, exact on one host.
// Collective over the world; a file that cannot be written fails on every rank.
void write_pipeline_timeline(const std::string& path, const PipelineExecutor::Stats& last,
                             int64_t iteration, ProcessGroups& groups);

}  // namespace tessel
