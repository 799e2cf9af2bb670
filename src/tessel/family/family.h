// Model families as units: one row per family of Hugging Face checkpoints (GPT-2, Llama and its
// Qwen2/Qwen3(-MoE) types, DeepSeek-V3 for the planner, Qwen3-Next / Qwen3.5) saying which
// config.json model_types it reads, how config.json maps to and from a ModelConfig, how its weight
// files are laid out, which model_types export may choose, and what the planner reads of its
// configs. Import and export (ckpt/hf*), the planner (plan/model_io.cpp) and the command line's
// choices all read families(); a new family is a file for its row (family/<name>.cpp) and its
// layers (docs/ARCHITECTURE.md, "Adding a model family").
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "tessel/family/weights.h"
#include "tessel/model/config.h"

namespace tessel {

// Megatron's --multi-latent-attention (DeepSeek-V2/V3): queries and keys/values pass through
// low-rank latents; each head's query/key has qk_head_dim + qk_pos_emb_head_dim dimensions (the
// second part carries RoPE), its value v_head_dim. Here because the planner reads it from a
// DeepSeek-V3 config.json; tessel does not train it.
struct MlaConfig {
  int q_lora_rank = 0;          // --q-lora-rank (0: queries projected directly)
  int kv_lora_rank = 0;         // --kv-lora-rank
  int qk_head_dim = 0;          // --qk-head-dim
  int qk_pos_emb_head_dim = 0;  // --qk-pos-emb-head-dim
  int v_head_dim = 0;           // --v-head-dim
};

// What the planner reads of a config.json: sizes only (it needs no weights, so it reads model
// types the importer cannot load), and what only the planner models (plan/model.h's PlanModel).
struct PlannerSizes {
  ModelConfig cfg;
  bool multi_latent_attention = false;
  MlaConfig mla;
};

struct Family {
  const char* name;
  // The config.json model_types import reads (and export writes) ...
  std::vector<std::string> model_types;
  // ... and those whose sizes only the planner reads.
  std::vector<std::string> planner_only_types;
  // The model_types export may be asked for (--hf-model-type, --save-hf-model-type); empty: the
  // model decides its model_type.
  std::vector<std::string> export_types;
  // Whether this family writes `cfg` (exactly one row does for a valid config; planner-only rows
  // write none), and those models in words, for errors.
  bool (*writes)(const ModelConfig& cfg);
  const char* writes_what;
  // config.json (of one of model_types) into a ModelConfig; errors name `source`.
  ModelConfig (*read)(const nlohmann::json& j, const std::string& model_type, const std::string& source);
  // config.json as `model_type` ("": the family's default for cfg).
  nlohmann::json (*write)(const ModelConfig& cfg, const std::string& model_type);
  // Why cfg cannot be written in this family's format (empty when it can).
  std::vector<std::string> (*export_violations)(const ModelConfig& cfg);
  // The weight files' layout export writes as `model_type` ("": the default).
  HfLayout (*layout)(const std::string& model_type);
  // What import lets a file hold for cfg; `model_type` is config.json's beside the weights.
  HfImportRules (*import_rules)(const ModelConfig& cfg, const std::string& model_type);
  // The planner's reading of a config.json of any of this family's types.
  PlannerSizes (*planner_sizes)(const nlohmann::json& j, const std::string& model_type,
                                const std::string& source);
};

// Every family, in the order error messages list their model types.
const std::vector<const Family*>& families();
// The family that reads `model_type` for import / for the planner; nullptr when none does.
const Family* family_reading(const std::string& model_type);
const Family* family_sizing(const std::string& model_type);
// The family that writes cfg (exports it, describes it in checkpoints, reads its weights).
const Family& family_writing(const ModelConfig& cfg);
// Every family's export choices, for the command line's flags.
std::vector<std::string> export_model_types();

// The one config.json reader: sizes from a Hugging Face config.json through its family's row.
// Settings tessel cannot reproduce (another activation, attention_bias true in llama or qwen3,
// which means an o_proj bias, RoPE scaling, ...) are errors naming `source`. seq_length is set to
// the maximum positions; callers that train on shorter sequences lower it afterwards.
ModelConfig model_config_from_hf(const nlohmann::json& j, const std::string& source);

// config.json for transformers, fp32, in the writing family's default model_type. Also the model
// description of checkpoints, so it exists for every valid config (family/llama.cpp says how a
// model no llama model_type fits exactly is recorded).
nlohmann::json hf_config_json(const ModelConfig& cfg);

// Why a model cannot be exported in a Hugging Face format (empty when it can). Training checks it
// before it starts when --save-hf is given.
std::vector<std::string> hf_export_violations(const ModelConfig& cfg);

// The planner's sizes of a config.json of any family's model type; errors name `source`.
PlannerSizes planner_sizes_from_hf(const nlohmann::json& j, const std::string& source);

}  // namespace tessel
