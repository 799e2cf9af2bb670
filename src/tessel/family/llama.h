// What the planner reads of the Llama family's config.json keys, for the rows of other families
// whose configs share them (family/deepseek_v3.cpp).
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "tessel/family/family.h"

namespace tessel {

// The attention and dense sizes of a Llama-style config.json (Llama, Qwen2/3, Mistral, Mixtral,
// DeepSeek-V3); Qwen2's model types have q/k/v biases, Qwen3's QK-norm.
void read_llama_planner_sizes(const nlohmann::json& j, const std::string& model_type,
                              const std::string& source, PlannerSizes& m);
// Their experts, under Qwen-MoE's, Mixtral's or DeepSeek's keys (none when no key names any).
void read_llama_planner_experts(const nlohmann::json& j, const std::string& source, PlannerSizes& m);

}  // namespace tessel
