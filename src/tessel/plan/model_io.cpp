// Model files for the planner: tessel's own JSON (the flag names with '_') and Hugging Face
// config.json files, read for their sizes only (the planner needs no weights, so it reads more
// model types than the importer in ckpt/hf.h can load).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "tessel/ckpt/hf_qwen3_next_config.h"
#include "tessel/core/error.h"
#include "tessel/model/config.h"
#include "tessel/plan/model.h"

namespace tessel {

namespace {

using nlohmann::json;

// The planner's keys beyond tessel's model file (model_fields()): what only the planner models.
bool planner_key(PlanModel& m, const std::string& key, const json& value) {
  if (key == "name")
    m.name = value.get<std::string>();
  else if (key == "hidden_dropout") m.hidden_dropout = value.get<double>();
  else if (key == "attention_dropout") m.attention_dropout = value.get<double>();
  else if (key == "multi_latent_attention") m.multi_latent_attention = value.get<bool>();
  else if (key == "q_lora_rank") m.mla.q_lora_rank = value.get<int>();
  else if (key == "kv_lora_rank") m.mla.kv_lora_rank = value.get<int>();
  else if (key == "qk_head_dim") m.mla.qk_head_dim = value.get<int>();
  else if (key == "qk_pos_emb_head_dim") m.mla.qk_pos_emb_head_dim = value.get<int>();
  else if (key == "v_head_dim")
    m.mla.v_head_dim = value.get<int>();
  else return false;
  return true;
}

template <typename T>
T get_or(const json& j, const char* key, T fallback) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? fallback : it->get<T>();
}

template <typename T>
T need(const json& j, const char* key, const std::string& source) {
  auto it = j.find(key);
  TESSEL_CHECK(it != j.end() && !it->is_null(), "{}: no \"{}\"", source, key);
  return it->get<T>();
}

// Hugging Face's config.json of a decoder: GPT-2's keys, or the Llama family's (Llama, Qwen2/3,
// their MoE variants, Mixtral, DeepSeek-V3 with multi-latent attention).
PlanModel model_from_hf(const json& j, const std::string& source) {
  PlanModel m;
  ModelConfig& c = m.cfg;
  const std::string type = need<std::string>(j, "model_type", source);
  m.name = type;
  if (type == "gpt2") {
    c.arch = Arch::GPT2;
    c.hidden_size = need<int>(j, "n_embd", source);
    c.num_layers = need<int>(j, "n_layer", source);
    c.num_attention_heads = need<int>(j, "n_head", source);
    c.ffn_hidden_size = get_or(j, "n_inner", 0);
    c.vocab_size = need<int>(j, "vocab_size", source);
    c.max_position_embeddings = need<int>(j, "n_positions", source);
    c.seq_length = c.max_position_embeddings;
    m.hidden_dropout = get_or(j, "resid_pdrop", 0.0);
    m.attention_dropout = get_or(j, "attn_pdrop", 0.0);
    return m;
  }
  if (is_qwen3_next_model_type(type)) {
    // The importer's reader (it refuses what tessel cannot build, such as RoPE scaling); MTP
    // layers as the published checkpoints carry them: Qwen3.5's mtp_num_hidden_layers, Qwen3-Next's
    // num_nextn_predict_layers (absent from its config.json: vLLM's default, 1).
    c = qwen3_next_config_from_hf(j, source);
    c.seq_length = c.max_position_embeddings;
    const json& text = type == "qwen3_5_moe" ? j.at("text_config") : j;
    c.mtp_num_layers = type == "qwen3_next" ? get_or(text, "num_nextn_predict_layers", 1)
                                            : get_or(text, "mtp_num_hidden_layers", 0);
    return m;
  }
  static const char* const kLlamaFamily[] = {"llama",      "qwen2",   "qwen3", "qwen2_moe",
                                             "qwen3_moe",  "mixtral", "mistral", "deepseek_v3"};
  bool known = false;
  for (const char* t : kLlamaFamily) known = known || type == t;
  TESSEL_CHECK(known, "{}: model_type '{}' is not known to the planner (gpt2, llama, qwen2, qwen3, "
               "qwen2_moe, qwen3_moe, mistral, mixtral, deepseek_v3, qwen3_next, qwen3_5_moe, "
               "qwen3_5_moe_text)", source, type);
  c.arch = Arch::Llama;
  c.hidden_size = need<int>(j, "hidden_size", source);
  c.num_layers = need<int>(j, "num_hidden_layers", source);
  c.num_attention_heads = need<int>(j, "num_attention_heads", source);
  c.num_query_groups = get_or(j, "num_key_value_heads", c.num_attention_heads);
  c.ffn_hidden_size = need<int>(j, "intermediate_size", source);
  c.vocab_size = need<int>(j, "vocab_size", source);
  c.max_position_embeddings = need<int>(j, "max_position_embeddings", source);
  c.seq_length = c.max_position_embeddings;
  c.add_qkv_bias = type.rfind("qwen2", 0) == 0 || get_or(j, "attention_bias", false);
  c.qk_layernorm = type.rfind("qwen3", 0) == 0;
  const int head_dim = get_or(j, "head_dim", 0);
  if (head_dim > 0 && head_dim * c.num_attention_heads != c.hidden_size) c.kv_channels = head_dim;
  if (type == "deepseek_v3") {
    m.multi_latent_attention = true;
    m.mla = {get_or(j, "q_lora_rank", 0), need<int>(j, "kv_lora_rank", source),
             need<int>(j, "qk_nope_head_dim", source), get_or(j, "qk_rope_head_dim", 0),
             need<int>(j, "v_head_dim", source)};
  }
  MoeConfig& e = c.moe;
  e.num_experts = get_or(j, "num_experts", get_or(j, "num_local_experts", get_or(j, "n_routed_experts", 0)));
  if (e.num_experts == 0) return m;
  e.topk = need<int>(j, "num_experts_per_tok", source);
  e.ffn_hidden_size = get_or(j, "moe_intermediate_size", c.ffn_hidden_size);
  e.shared_expert_size = get_or(j, "shared_expert_intermediate_size",
                                get_or(j, "n_shared_experts", 0) * e.ffn_hidden_size);
  // Qwen2-MoE's shared expert (shared_expert_intermediate_size) is gated; DeepSeek's are not.
  e.shared_expert_gate = j.contains("shared_expert_intermediate_size") && e.shared_expert_size > 0;
  e.score_sigmoid = get_or<std::string>(j, "scoring_func", "softmax") == "sigmoid";
  e.layer_pattern.assign(c.num_layers, 1);
  for (int l = 0; l < std::min(get_or(j, "first_k_dense_replace", 0), c.num_layers); ++l) e.layer_pattern[l] = 0;
  for (int l : get_or(j, "mlp_only_layers", std::vector<int>{}))
    if (l >= 0 && l < c.num_layers) e.layer_pattern[l] = 0;
  return m;
}

}  // namespace

void plan_model_from_json(const json& j, PlanModel& m, const std::string& source) {
  TESSEL_CHECK(j.is_object(), "{}: expected a JSON object", source);
  json sizes = json::object();
  try {
    for (auto& [key, value] : j.items())
      if (!planner_key(m, key, value)) sizes[key] = value;
  } catch (const json::exception& e) {
    fail("{}: {}", source, e.what());
  }
  model_config_from_json(sizes, m.cfg, source);
}

PlanModel load_plan_model(const std::string& path) {
  const json j = read_model_file(path);
  PlanModel m;
  try {
    if (j.is_object() && j.contains("model_type")) m = model_from_hf(j, path);
    else plan_model_from_json(j, m, path);
  } catch (const json::exception& e) {
    fail("{}: {}", path, e.what());
  }
  if (m.name.empty() || m.name == j.value("model_type", "")) m.name = path;
  return m;
}

json plan_model_to_json(const PlanModel& m) {
  json j = model_config_to_json(m.cfg);
  j["name"] = m.name;
  if (m.hidden_dropout > 0) j["hidden_dropout"] = m.hidden_dropout;
  if (m.attention_dropout > 0) j["attention_dropout"] = m.attention_dropout;
  if (m.multi_latent_attention) {
    j["multi_latent_attention"] = true;
    j["q_lora_rank"] = m.mla.q_lora_rank;
    j["kv_lora_rank"] = m.mla.kv_lora_rank;
    j["qk_head_dim"] = m.mla.qk_head_dim;
    j["qk_pos_emb_head_dim"] = m.mla.qk_pos_emb_head_dim;
    j["v_head_dim"] = m.mla.v_head_dim;
  }
  return j;
}

}  // namespace tessel
