// Hugging Face weights into a rank's parameters, under any layout. The file is matched against
// the whole model (every parameter's global name and shape, from the declare-only build) and
// checked as one — no tensor unexpected or missing, every shape and dtype right — on every rank;
// each rank then reads only the rows of the tensors it holds (its pipeline stage's or V's chunks,
// its experts, a tied embedding's copy, MTP on the last stage) and keeps its TP / ETP slice.
#pragma once

#include <string>
#include <vector>

#include "tessel/ckpt/hf_files.h"
#include "tessel/ckpt/hf_layout.h"
#include "tessel/core/params.h"
#include "tessel/model/config.h"

namespace tessel {

// Fills `mine` — this rank's parameters: any of `whole`'s, each whole or a slice by its shard
// spec — from `files`. Every tensor name of the files (the index's, for a sharded folder) must
// be one of `whole`'s in the layout the names show (ckpt/hf_layout.h) or one the rules skip, and
// every tensor of `whole` must be there; the shards holding `mine`'s tensors are opened and every
// tensor in them is checked (shape, float dtype) before any value moves, so a refused file leaves
// `mine` as it was. Errors name the file (or the index) and the tensor, in one line.
void load_hf_params(ParamRegistry& mine, const ParamRegistry& whole, HfWeightFiles& files,
                    const HfImportRules& rules);

// The same for a model config: `whole` is its declare-only build, the rules (family/weights.h)
// its family's import_rules, and
// `path` a safetensors file or a Hugging Face folder (model.safetensors, or an index and shards;
// config.json's model_type read beside it). `registry` holds this rank's parameters of `cfg`.
// Returns the weight files it opened (HfWeightFiles::opened_files).
std::vector<std::string> load_hf_weights(ParamRegistry& registry, const ModelConfig& cfg, const std::string& path);

}  // namespace tessel
