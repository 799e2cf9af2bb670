// A pipeline's virtual stages and the stages' layers, from the pipeline flags: one rule for train,
// `tessel layout` and `tessel plan`.
#pragma once

#include <string>
#include <vector>

#include "tessel/parallel/layout.h"
#include "tessel/pipeline/stages.h"
#include "tessel/train/options.h"

namespace tessel {

// The virtual stages per rank that --num-layers-per-virtual-pipeline-stage (the layers of a
// pipeline stage over the layers of a chunk) or --pipeline-model-parallel-layout (its entries over
// PP) give, as Megatron's argument validation derives them: sets config.vpp and returns the rules
// broken, one message each (at most one of those two and --num-virtual-stages-per-pipeline-rank;
// a layout that does not parse). The stages' rules (stage_violations) follow from the virtual
// stages: with any of these broken they would restate them, and are not asked.
std::vector<std::string> resolve_virtual_stages(int num_layers, const PipelineOptions& pipeline, ParallelConfig& config);

// The stages of a layout, as the pipeline flags ask, for a model with mtp_layers MTP layers.
StageOptions stage_options(const ParallelConfig& config, const PipelineOptions& pipeline, int mtp_layers);

}  // namespace tessel
