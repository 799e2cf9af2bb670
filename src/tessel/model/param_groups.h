// The parameters that Megatron's optimizer puts in a group of their own by what they are, not by
// their shape: the input embedding and the output layer (--decoupled-lr's group).
#pragma once

#include "tessel/core/params.h"
#include "tessel/model/config.h"

namespace tessel {

// The untied output layer's weight, by its Hugging Face name.
inline constexpr const char* kOutputLayerName = "lm_head.weight";

// Megatron's is_embedding_or_output_parameter: the word embeddings, every copy of them (a tied
// head's on the last stage, multi-token prediction's), and the untied output layer. GPT-2's
// position embeddings are not among them, as Megatron's are not.
bool is_embedding_or_output_param(const Param& p, const ModelConfig& cfg);

}  // namespace tessel
