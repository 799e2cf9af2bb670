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

// What a file may hold besides the model's tensors, and how its names may differ from tessel's.
struct HfImportRules {
  std::string model = "llama";  // in errors: "this llama model has no such parameter"
  // GPT-2's own files were saved from GPT2Model: names without "transformer.".
  bool gpt2_bare_names = false;
  // lm_head.weight beside tied embeddings repeats them: skipped.
  bool tied_head = false;
  // Qwen3.5's files: the vision tower (model.visual.*), and mtp.* where the model has no MTP
  // (as transformers' text decoders do), skipped.
  bool qwen_extras = false;
  // config.json's model_type of a Gated DeltaNet model ("" when none): qwen3_next needs grouped
  // GDN projections, the Qwen3.5 types flat ones.
  std::string family;
  GdnHeads heads;  // for the grouped GDN layout
};

// Fills `mine` — this rank's parameters: any of `whole`'s, each whole or a slice by its shard
// spec — from `files`. Every tensor name of the files (the index's, for a sharded folder) must
// be one of `whole`'s in the layout the names show (ckpt/hf_layout.h) or one the rules skip, and
// every tensor of `whole` must be there; the shards holding `mine`'s tensors are opened and every
// tensor in them is checked (shape, float dtype) before any value moves, so a refused file leaves
// `mine` as it was. Errors name the file (or the index) and the tensor, in one line.
void load_hf_params(ParamRegistry& mine, const ParamRegistry& whole, HfWeightFiles& files,
                    const HfImportRules& rules);

// The same for a model config: `whole` is its declare-only build, the rules its family's, and
// `path` a safetensors file or a Hugging Face folder (model.safetensors, or an index and shards;
// config.json's model_type read beside it). `registry` holds this rank's parameters of `cfg`.
// Returns the weight files it opened (HfWeightFiles::opened_files).
std::vector<std::string> load_hf_weights(ParamRegistry& registry, const ModelConfig& cfg, const std::string& path);

}  // namespace tessel
