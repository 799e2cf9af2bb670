// config.json of the Qwen3-Next architecture in its three model_types — qwen3_next
// (Qwen3NextConfig), qwen3_5_moe (Qwen3.5's vision-language config, the decoder under
// "text_config") and qwen3_5_moe_text (the decoder alone) — read into and written from a
// ModelConfig with Gated DeltaNet layers, and the checkpoint layout each family publishes.
// Facts: ../shared/QWEN3_NEXT.md §1–2 (transformers' configuration_qwen3_next.py and
// configuration_qwen3_5_moe.py).
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "tessel/ckpt/hf_layout.h"
#include "tessel/model/config.h"

namespace tessel {

// What a Gated DeltaNet model is written as when nothing asks otherwise: the decoder alone in
// tessel's own layout (flat GDN projections), so a checkpoint's description needs no choice.
inline constexpr const char* kDefaultQwenModelType = "qwen3_5_moe_text";

bool is_qwen3_next_model_type(const std::string& model_type);

// The sizes of a config.json whose model_type is one of the three. Settings tessel cannot
// reproduce (RoPE scaling, another activation, attention biases, tied or dedicated MTP
// embeddings, decoder_sparse_step other than 1) and missing sizes are errors naming `source`
// (and "text_config" inside a qwen3_5_moe file). MTP layers from mtp_num_hidden_layers
// (Qwen3.5) or num_nextn_predict_layers (Qwen3-Next, as vLLM reads it), none when absent; more
// than one is refused (Hugging Face's layout has one set of mtp.fc and norms).
ModelConfig qwen3_next_config_from_hf(const nlohmann::json& j, const std::string& source);

// config.json of a Gated DeltaNet model as `model_type`. Options the family fixes but tessel
// leaves open (QK-norm, zero-centred norms, the output gate of qwen3_next, the shared-expert
// gate, q/k/v biases) are recorded under "tessel_options" when they differ, so tessel reads back
// what it wrote.
nlohmann::json qwen3_next_config_json(const ModelConfig& cfg, const std::string& model_type);

// The layout each family's published checkpoints use: qwen3_next grouped in_proj_qkvz /
// in_proj_ba with per-expert experts; qwen3_5_moe flat projections, packed experts in the
// decoder, per-expert MTP experts, the decoder under model.language_model.; qwen3_5_moe_text the
// same without the prefix.
HfLayout hf_qwen_layout_for(const std::string& model_type);

GdnHeads gdn_heads(const ModelConfig& cfg);

}  // namespace tessel
