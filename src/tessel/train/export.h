// Hugging Face folders written from tessel's weights: `tessel export`'s (a fresh initialisation,
// converted weights or a consolidated save) and --save-hf's at the end of training (the whole
// model gathered from every rank's shards, written by world rank 0).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tessel/core/params.h"
#include "tessel/data/tokenizer.h"
#include "tessel/model/config.h"
#include "tessel/parallel/groups.h"
#include "tessel/train/plan.h"

namespace tessel {

// Where `tessel export`'s weights come from: the newest save of a --save folder (`load`, any
// layout), else a Hugging Face file or folder to convert (`init_from`), else a fresh
// initialisation from `seed`.
struct ExportSource {
  uint64_t seed = 1234;
  std::string init_from;
  std::string load;
};

// `tessel export`: `cfg`'s model with the source's weights, written to `out_dir` as
// model.safetensors (or shards of at most `max_shard_bytes` and their index, when it is > 0) and
// config.json, with the tokenizer's files when `tokenizer` names one (it must be the one a --load
// save was trained with). --vocab-size 0 takes the tokenizer's size (the
// byte tokenizer's without one). A model whose family offers several model_types is written as
// `hf_model_type` (ckpt/hf.h's export_hf). Returns the parameter count; throws naming the bad input.
int64_t export_model(ModelConfig cfg, std::optional<TokenizerOptions> tokenizer,
                     const ExportSource& source, const std::string& out_dir,
                     const std::string& hf_model_type = "", int64_t max_shard_bytes = 0);

// The flags and paths a Hugging Face folder is made from (the weights' --init-from or --load, the
// tokenizer's files): the folder written must lie apart from them (require_apart_from_sources).
std::vector<std::pair<std::string, std::string>> export_sources(const std::optional<TokenizerOptions>& tokenizer,
                                                                const std::string& init_from,
                                                                const std::string& load);

// The model_type a model whose family offers several (family/family.h's export_types: Qwen3-Next's)
// is written as: `requested` when given, else that of the folder it was read from (`init_from`,
// when it is one of the family's), else "" (export_hf's default: the family's). "" for other models.
std::string hf_export_model_type(const ModelConfig& cfg, const std::string& requested, const std::string& init_from);

// Collective over the world. TP shards are gathered over TP and experts' ETP slices over ETP,
// the first expert-DP replica's EP ranks send their experts to EP rank 0, then the pipeline
// stages of the first DP replica send theirs to stage 0 (each stage's tensors in the order its
// own chunks declare them, all experts), which writes plan.options.checkpoint.save_hf. It throws
// (non-finite weights, a failed write) only there, after all its communication is done.
void export_gathered(const ParamRegistry& params, const TrainPlan& plan, ProcessGroups& groups);

}  // namespace tessel
