// Hugging Face import and export: a folder with config.json and model.safetensors that
// transformers loads as GPT2LMHeadModel, LlamaForCausalLM or a Qwen2/Qwen3(-MoE) model, and back. Parameter names and
// shapes are already Hugging Face's (DESIGN invariant 2), so weights move under their own names.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tessel/model/config.h"
#include "tessel/core/params.h"

namespace tessel {

// config.json for transformers, fp32 (a model with Gated DeltaNet layers: qwen3_5_moe_text, see
// ckpt/hf_qwen3_next_config.h): GPT2LMHeadModel for gpt2; for llama the model_type follows
// the attention options and experts: llama (neither), qwen2 (--add-qkv-bias), qwen3
// (--qk-layernorm), qwen2_moe / qwen3_moe with experts. Also the model description of checkpoints,
// so it exists for every valid config: one that no model_type fits exactly (experts without
// either option, or both options) takes the nearest and records its own options in
// "tessel_attention".
nlohmann::json hf_config_json(const ModelConfig& cfg);

// The inverse: sizes from a Hugging Face config.json (model_type gpt2, llama, qwen2, qwen3,
// qwen2_moe, qwen3_moe, or qwen3_next, qwen3_5_moe and qwen3_5_moe_text). Settings tessel cannot reproduce (another activation, attention_bias
// true in llama or qwen3, which means an o_proj bias, RoPE scaling, ...) are errors
// naming `source`. seq_length is set to the maximum positions; callers that train on shorter
// sequences lower it afterwards.
ModelConfig model_config_from_hf(const nlohmann::json& j, const std::string& source);

// Why a model cannot be exported in a Hugging Face format (empty when it can; always for a model
// with Gated DeltaNet layers, whose config.json records what its family fixes): a --qk-layernorm
// MoE model with a shared expert (it would be qwen3_moe, which has none). Training checks it
// before it starts when --save-hf is given.
std::vector<std::string> hf_export_violations(const ModelConfig& cfg);

// Writes dir/model.safetensors (every registry parameter under its name, F32; shards of at most
// `max_shard_bytes` and their index when it is > 0, ckpt/hf_files.h) and dir/config.json,
// creating dir. Parameters must be whole tensors (no TP/EP shards): training gathers them first
// (train/export.h). Reading back: ckpt/hf_import.h.
// Throws for a model with hf_export_violations. A model with Gated DeltaNet layers is written as
// `model_type` (qwen3_next, qwen3_5_moe or qwen3_5_moe_text; empty: qwen3_5_moe_text) in that
// family's checkpoint layout; `model_type` is refused for other models.
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
