// Hugging Face export, and the config.json beside weights: a folder with config.json and
// model.safetensors that transformers loads, written and found through the model's family
// (family/family.h: config.json read and written, weight layouts, export choices). Parameter names
// and shapes are already Hugging Face's (DESIGN invariant 2), so weights move under their own names.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tessel/core/params.h"
#include "tessel/family/family.h"
#include "tessel/model/config.h"

namespace tessel {

// Writes dir/model.safetensors (every registry parameter under its name, F32; shards of at most
// `max_shard_bytes` and their index when it is > 0, ckpt/hf_files.h) and dir/config.json,
// creating dir. Parameters must be whole tensors (no TP/EP shards): training gathers them first
// (train/export.h). Reading back: ckpt/hf_import.h.
// Throws for a model with hf_export_violations. A model whose family offers several model_types
// (export_model_types: Qwen3-Next's) is written as `model_type` (empty: the family's default) in
// that type's checkpoint layout; `model_type` is refused for other models.
void export_hf(const ParamRegistry& registry, const ModelConfig& cfg, const std::string& dir,
               const std::string& model_type = "", int64_t max_shard_bytes = 0);

// The model config beside a weights file, for `--init-from` to take its sizes from: reads
// config.json from the folder `path` names (or the folder holding the file `path` names) through
// model_config_from_hf. nullopt when there is no config.json there.
std::optional<ModelConfig> hf_config_beside(const std::string& path);
// The same file as JSON (nullopt when there is none; invalid JSON is an error naming it), and its
// model_type ("" when there is no file or no model_type).
std::optional<nlohmann::json> hf_config_json_beside(const std::string& path);
std::string hf_model_type_beside(const std::string& path);

}  // namespace tessel
