// Which layers each pipeline rank holds, as Megatron assigns them. The model is cut into
// p · v model chunks (v virtual stages per rank); model chunk k lives on pipeline rank k mod p as
// its chunk k / p, so with VPP a rank holds every p-th piece of the model (seed example 9) — or,
// in the V placement of ZB-V and DualPipeV (v = 2), rank r holds model chunks r and 2p − 1 − r
// (pipeline/schedule.h).
//   even split:   every model chunk gets num_layers / (p · v) layers;
//   uneven split: --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers fix
//                 the first and last stages, the rest is split evenly (v = 1);
//   layout:       --pipeline-model-parallel-layout, Megatron's string: one '|'-separated entry per
//                 model chunk, 't' a Transformer layer, 'E' the embedding (first), 'L' the loss
//                 (last), 'm' an MTP layer (after every 't', in the last chunk), "X*n" repeats,
//                 parentheses group, e.g. "Et*3|(tt|)*2tL"; without --num-virtual-stages-per-
//                 pipeline-rank its entries over PP give the virtual stages (Megatron's rule).
// The embedding lives in model chunk 0 and the final norm, LM head and loss in the last.
#pragma once

#include <string>
#include <vector>

#include "tessel/model/transformer.h"
#include "tessel/pipeline/schedule.h"

namespace tessel {

struct StageOptions {
  int pipeline_size = 1;   // p
  int virtual_stages = 1;  // v
  int first_stage_layers = -1;  // --decoder-first-pipeline-num-layers (-1: not given)
  int last_stage_layers = -1;   // --decoder-last-pipeline-num-layers
  std::string layout;           // --pipeline-model-parallel-layout
  Placement placement = Placement::Looped;  // the schedule's
  int mtp_layers = 0;  // --mtp-num-layers: the layout's 'm' entries
};

// The model chunks a --pipeline-model-parallel-layout names (its '|'-separated entries); 0 for a
// layout that does not parse, whose errors are appended to `errors`.
int layout_stage_count(const std::string& layout, std::vector<std::string>& errors);

// Every rule broken (layers not dividing, a malformed layout string, ...), one message each.
std::vector<std::string> stage_violations(int num_layers, const StageOptions& options);

// chunks[model chunk] for k = 0 .. p·v − 1. Throws tessel::Error listing stage_violations.
std::vector<ChunkSpec> assign_layers(int num_layers, const StageOptions& options);

// The model chunks of one pipeline rank, in its chunk order (model_chunk_index of its chunk c).
std::vector<ChunkSpec> rank_chunks(const std::vector<ChunkSpec>& all, const StageOptions& options, int rank);

}  // namespace tessel
