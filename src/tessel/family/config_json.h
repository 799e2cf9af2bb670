// The one way families read and write Hugging Face config.json values (family/*.cpp): typed field
// reads whose errors name the file and the field, and the expert keys two families share.
#pragma once

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/core/json_values.h"
#include "tessel/model/config.h"

namespace tessel::config_json {

// fp32 values written as their shortest decimal form (1e-05, not 9.999999747378752e-06): readable,
// and parsing it back yields the same float.
inline double json_float(float v) { return std::stod(fmt::format("{}", v)); }

// The problems of a file's keys (a required key missing, a value of the wrong type or out of
// range) met while read_every_key reads it: reported together, not one a run. Null outside.
struct KeyProblems {
  std::vector<std::string> messages;  // each as it would be thrown alone: "SOURCE: problem"
};
inline thread_local KeyProblems* key_problems = nullptr;

// A key's problem: thrown, or inside read_every_key kept, the read going on with T's zero.
template <typename T>
T key_problem(std::string message) {
  if (key_problems == nullptr) throw Error(message);
  key_problems->messages.push_back(std::move(message));
  return T{};
}

// Runs read() (a family's reading of `file`) and throws one Error naming the file with every key
// problem met. A read refused for another reason after a key problem is not reported: it read
// the zero that stood for the key.
template <typename Read>
auto read_every_key(const std::string& file, Read read) -> decltype(read()) {
  KeyProblems problems;
  struct Collecting {  // for the read alone, whatever it throws
    KeyProblems* outer;
    ~Collecting() { key_problems = outer; }
  } collecting{std::exchange(key_problems, &problems)};
  std::optional<decltype(read())> result;
  try {
    result = read();
  } catch (const std::exception&) {
    if (problems.messages.empty()) throw;
  }
  if (problems.messages.empty()) return std::move(*result);
  std::string all;
  for (const std::string& m : problems.messages)  // the file named once, at the front
    all += (all.empty() ? "" : "; ") + (m.starts_with(file + ": ") ? m.substr(file.size() + 2) : m);
  throw Error(fmt::format("{}: {}", file, all));
}

// Numbers are range-checked (core/json_values.h): 4294967298 layers is an error, not 2.
template <typename T>
T value_as(const nlohmann::json& value, const char* key, const std::string& source) {
  try {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      if (value.is_number()) return json_integer<T>(value, source, key);
    } else if constexpr (std::is_floating_point_v<T>) {
      if (value.is_number()) return json_number<T>(value, source, key);
    }
  } catch (const Error& e) {
    return key_problem<T>(e.what());
  }
  try {
    return value.get<T>();
  } catch (const nlohmann::json::exception&) {
    return key_problem<T>(fmt::format("{}: key '{}' has a value of the wrong type ({})", source, key, value.dump()));
  }
}

template <typename T>
T required(const nlohmann::json& j, const char* key, const std::string& source) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return key_problem<T>(fmt::format("{}: missing key '{}'", source, key));
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
