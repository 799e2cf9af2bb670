#include "tessel/family/config_json.h"

namespace tessel {

using config_json::optional_value;
using config_json::required;

void moe_to_hf(const ModelConfig& cfg, nlohmann::json& j) {
  // Qwen-MoE's names and keys for the experts.
  const MoeConfig& m = cfg.moe;
  j["num_experts"] = m.num_experts;
  j["num_experts_per_tok"] = m.topk;
  j["moe_intermediate_size"] = m.ffn_hidden_size > 0 ? m.ffn_hidden_size : cfg.ffn_size();
  j["shared_expert_intermediate_size"] = m.shared_expert_size;
  j["norm_topk_prob"] = !m.pre_softmax;
  j["router_aux_loss_coef"] = m.aux_loss_coeff;
  j["decoder_sparse_step"] = 1;
  nlohmann::json dense = nlohmann::json::array();
  for (int l = 0; l < cfg.num_layers; ++l)
    if (!m.is_moe_layer(l)) dense.push_back(l);
  j["mlp_only_layers"] = dense;
  j["tessel_moe"] = {{"score_function", m.score_sigmoid ? "sigmoid" : "softmax"},
                     {"pre_softmax", m.pre_softmax},
                     {"z_loss_coeff", m.z_loss_coeff},
                     {"capacity_factor", m.capacity_factor},
                     {"pad_to_capacity", m.pad_to_capacity},
                     {"shared_expert_gate", m.shared_expert_gate}};
}

void moe_from_hf(const nlohmann::json& j, ModelConfig& cfg, const std::string& source) {
  MoeConfig& m = cfg.moe;
  m.num_experts = required<int>(j, "num_experts", source);
  m.topk = required<int>(j, "num_experts_per_tok", source);
  m.ffn_hidden_size = required<int>(j, "moe_intermediate_size", source);
  m.shared_expert_size = optional_value(j, "shared_expert_intermediate_size", source, 0);
  // Qwen2-MoE's shared expert always has its sigmoid gate (shared_expert_gate.weight).
  m.shared_expert_gate = m.shared_expert_size > 0;
  // transformers' Qwen2MoeConfig and Qwen3MoeConfig default norm_topk_prob to false.
  m.pre_softmax = !optional_value(j, "norm_topk_prob", source, false);
  m.aux_loss_coeff = optional_value(j, "router_aux_loss_coef", source, 0.0f);
  m.layer_pattern.assign(cfg.num_layers, 1);
  for (const nlohmann::json& layer : optional_value(j, "mlp_only_layers", source, nlohmann::json::array()))
    m.layer_pattern[json_whole_number(layer, source, "mlp_only_layers", 0, cfg.num_layers - 1)] = 0;
  if (j.contains("tessel_moe")) {
    const nlohmann::json& t = j["tessel_moe"];
    m.score_sigmoid = optional_value<std::string>(t, "score_function", source, "softmax") == "sigmoid";
    m.z_loss_coeff = optional_value(t, "z_loss_coeff", source, 0.0f);
    m.capacity_factor = optional_value(t, "capacity_factor", source, 0.0);
    m.pad_to_capacity = optional_value(t, "pad_to_capacity", source, false);
    // A checkpoint's description of a model with an ungated shared expert (no Hugging Face export).
    m.shared_expert_gate = optional_value(t, "shared_expert_gate", source, m.shared_expert_gate);
  }
}

std::vector<std::string> moe_export_violations(const ModelConfig& cfg) {
  std::vector<std::string> v;
  if (cfg.qk_layernorm && cfg.moe.num_experts > 0 && cfg.moe.shared_expert_size > 0)
    v.push_back("a --qk-layernorm MoE model exports as qwen3_moe, which has no shared expert "
                "(--moe-shared-expert-intermediate-size)");
  if (cfg.moe.num_experts > 0 && cfg.moe.shared_expert_size > 0 && !cfg.moe.shared_expert_gate)
    v.push_back("a shared expert exports as qwen2_moe's, which is gated: add --moe-shared-expert-gate");
  return v;
}

}  // namespace tessel
