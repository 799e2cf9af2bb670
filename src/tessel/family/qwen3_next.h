// The Qwen3-Next architecture's config.json in its three model_types — qwen3_next
// (Qwen3NextConfig), qwen3_5_moe (Qwen3.5's vision-language config, the decoder under
// "text_config") and qwen3_5_moe_text (the decoder alone) — for a ModelConfig with Gated DeltaNet
// layers. The family's row (family/qwen3_next.cpp) reads it back and picks each type's checkpoint
// layout. Facts: docs/QWEN3_NEXT.md §1–2 (transformers' configuration_qwen3_next.py and
// configuration_qwen3_5_moe.py).
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "tessel/model/config.h"

namespace tessel {

// config.json of a Gated DeltaNet model as `model_type`. Options the family fixes but tessel
// leaves open (QK-norm, zero-centred norms, the output gate of qwen3_next, the shared-expert
// gate, q/k/v biases) are recorded under "tessel_options" when they differ, so tessel reads back
// what it wrote.
nlohmann::json qwen3_next_config_json(const ModelConfig& cfg, const std::string& model_type);

}  // namespace tessel
