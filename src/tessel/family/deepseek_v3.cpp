// DeepSeek-V3, for the planner only: Llama-style sizes with multi-latent attention and DeepSeek's
// expert keys (n_routed_experts, n_shared_experts, first_k_dense_replace). tessel trains neither
// MLA nor reads these weights, so the row has no config.json reader, writer or weight layout.
#include <nlohmann/json.hpp>

#include "tessel/family/config_json.h"
#include "tessel/family/llama.h"

namespace tessel {

namespace {

using config_json::optional_value;
using config_json::required;

PlannerSizes planner_sizes(const nlohmann::json& j, const std::string& model_type, const std::string& source) {
  PlannerSizes m;
  read_llama_planner_sizes(j, model_type, source, m);
  m.multi_latent_attention = true;
  m.mla = {optional_value(j, "q_lora_rank", source, 0), required<int>(j, "kv_lora_rank", source),
           required<int>(j, "qk_nope_head_dim", source), optional_value(j, "qk_rope_head_dim", source, 0),
           required<int>(j, "v_head_dim", source)};
  read_llama_planner_experts(j, source, m);
  return m;
}

}  // namespace

const Family& deepseek_v3_family() {
  static const Family row{
      .name = "deepseek_v3",
      .planner_only_types = {"deepseek_v3"},
      .planner_sizes = planner_sizes,
  };
  return row;
}

}  // namespace tessel
