// The one way families read and write Hugging Face config.json values (family/*.cpp): typed field
// reads whose errors name the file and the field, and the expert keys two families share.
#pragma once

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/core/json_values.h"
#include "tessel/model/config.h"

namespace tessel::config_json {

// fp32 values written as their shortest decimal form (1e-05, not 9.999999747378752e-06): readable,
// and parsing it back yields the same float.
inline double json_float(float v) { return std::stod(fmt::format("{}", v)); }

// Numbers are range-checked (core/json_values.h): 4294967298 layers is an error, not 2.
template <typename T>
T value_as(const nlohmann::json& value, const char* key, const std::string& source) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (value.is_number()) return json_integer<T>(value, source, key);
  } else if constexpr (std::is_floating_point_v<T>) {
    if (value.is_number()) return json_number<T>(value, source, key);
  }
  try {
    return value.get<T>();
  } catch (const nlohmann::json::exception&) {
    fail("{}: key '{}' has a value of the wrong type ({})", source, key, value.dump());
  }
}

template <typename T>
T required(const nlohmann::json& j, const char* key, const std::string& source) {
  auto it = j.find(key);
  TESSEL_CHECK(it != j.end() && !it->is_null(), "{}: missing key '{}'", source, key);
  return value_as<T>(*it, key, source);
}

// The value of `key`, or `fallback` when it is absent or null (transformers' default).
template <typename T>
T optional_value(const nlohmann::json& j, const char* key, const std::string& source, T fallback) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? fallback : value_as<T>(*it, key, source);
}

}  // namespace tessel::config_json

namespace tessel {

// The MoE keys of Qwen-MoE config.json files (num_experts, num_experts_per_tok,
// moe_intermediate_size, shared_expert_intermediate_size, norm_topk_prob, router_aux_loss_coef,
// mlp_only_layers) and tessel's own "tessel_moe" settings, read into and written from cfg.moe.
void moe_from_hf(const nlohmann::json& j, ModelConfig& cfg, const std::string& source);
void moe_to_hf(const ModelConfig& cfg, nlohmann::json& j);

// Why a model's experts cannot be written under those keys (empty when they can): a --qk-layernorm
// MoE model with a shared expert (it would be qwen3_moe, which has none), an ungated shared expert
// (qwen2_moe's is gated).
std::vector<std::string> moe_export_violations(const ModelConfig& cfg);

}  // namespace tessel
