// Llama (transformers' LlamaForCausalLM) and the Qwen model types that are tessel's llama
// architecture with options: RMSNorm, SwiGLU, RoPE, grouped-query attention, untied head; Qwen2's
// q/k/v biases, Qwen3's QK-norm, Qwen-MoE's experts. Weights under tessel's own names. The planner
// also reads Mistral's and Mixtral's configs, whose sizes are the same keys.
#include "tessel/family/llama.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "tessel/core/error.h"
#include "tessel/family/config_json.h"

namespace tessel {

namespace {

using config_json::json_float;
using config_json::optional_value;
using config_json::required;

// The Hugging Face model types of tessel's llama architecture, one row each. transformers' Qwen2
// attention always has q/k/v biases and Qwen3's always has q_norm/k_norm; where a type reads
// "attention_bias", true means q/k/v *and* o_proj biases, and tessel has no o_proj bias.
struct LlamaType {
  const char* model_type;
  const char* architecture;
  bool moe;                  // Qwen-MoE expert keys and names
  bool qkv_bias;             // --add-qkv-bias
  bool qk_layernorm;         // --qk-layernorm
  bool reads_attention_bias;
};
constexpr LlamaType kLlamaTypes[] = {
    {"llama", "LlamaForCausalLM", false, false, false, true},
    {"qwen2", "Qwen2ForCausalLM", false, true, false, false},
    {"qwen3", "Qwen3ForCausalLM", false, false, true, true},
    {"qwen2_moe", "Qwen2MoeForCausalLM", true, true, false, false},
    {"qwen3_moe", "Qwen3MoeForCausalLM", true, false, true, true},
};

const LlamaType& llama_type(const std::string& model_type) {
  for (const LlamaType& t : kLlamaTypes)
    if (model_type == t.model_type) return t;
  fail("model_type '{}' is not one of the llama family's", model_type);
}

// The row for a model: QK-norm makes it Qwen3, q/k/v biases Qwen2, experts the MoE variant. Two
// kinds of model match no row exactly: experts without q/k/v biases (written as qwen2_moe) and
// both options (qwen3 with attention_bias, so with an o_proj bias too). Their Hugging Face
// folders hold fewer tensors than transformers expects; config.json records tessel's options
// under "tessel_attention" so that tessel reads them back as they were.
const LlamaType& llama_type_of(const ModelConfig& cfg) {
  const bool moe = cfg.moe.num_experts > 0;
  const char* type = cfg.qk_layernorm ? (moe ? "qwen3_moe" : "qwen3")
                     : moe               ? "qwen2_moe"
                     : cfg.add_qkv_bias  ? "qwen2"
                                         : "llama";
  return llama_type(type);
}

bool is_exact(const LlamaType& t, const ModelConfig& cfg) {
  return t.qkv_bias == cfg.add_qkv_bias && t.qk_layernorm == cfg.qk_layernorm;
}

// The sizes every llama-layout config.json gives, read alike by the importer and the planner.
void read_sizes(const nlohmann::json& j, const std::string& source, ModelConfig& c) {
  c.hidden_size = required<int>(j, "hidden_size", source);
  c.num_layers = required<int>(j, "num_hidden_layers", source);
  c.num_attention_heads = required<int>(j, "num_attention_heads", source);
  c.num_query_groups = optional_value(j, "num_key_value_heads", source, c.num_attention_heads);
  c.ffn_hidden_size = required<int>(j, "intermediate_size", source);
  c.vocab_size = required<int>(j, "vocab_size", source);
  c.max_position_embeddings = required<int>(j, "max_position_embeddings", source);
}

ModelConfig read(const nlohmann::json& j, const std::string& model_type, const std::string& source) {
  const LlamaType& type = llama_type(model_type);
  ModelConfig cfg;
  cfg.arch = Arch::Llama;
  // Hugging Face's Llama has attention dropout only; no hidden dropout.
  cfg.hidden_dropout = 0.0f;
  cfg.attention_dropout = optional_value(j, "attention_dropout", source, 0.0f);
  cfg.add_qkv_bias = type.qkv_bias;
  cfg.qk_layernorm = type.qk_layernorm;
  if (auto own = j.find("tessel_attention"); own != j.end()) {
    cfg.add_qkv_bias = required<bool>(*own, "add_qkv_bias", source);
    cfg.qk_layernorm = required<bool>(*own, "qk_layernorm", source);
  } else if (type.reads_attention_bias) {
    TESSEL_CHECK(!optional_value(j, "attention_bias", source, false),
                 "{}: attention_bias true is not supported ({} then has q/k/v and o_proj biases; "
                 "tessel has no o_proj bias)",
                 source, type.model_type);
  }
  read_sizes(j, source, cfg);
  cfg.layernorm_1p = optional_value(j, "tessel_layernorm_1p", source, false);
  cfg.norm_epsilon = optional_value(j, "rms_norm_eps", source, 1e-6f);
  cfg.rotary_base = optional_value(j, "rope_theta", source, 10000.0f);
  cfg.mtp_num_layers = optional_value(j, "num_nextn_predict_layers", source, 0);
  if (cfg.num_attention_heads > 0) {
    const int head_dim =
        optional_value(j, "head_dim", source, cfg.hidden_size / cfg.num_attention_heads);
    TESSEL_CHECK(head_dim * cfg.num_attention_heads == cfg.hidden_size,
                 "{}: head_dim {} is not hidden_size / num_attention_heads ({} / {}); tessel "
                 "needs them equal",
                 source, head_dim, cfg.hidden_size, cfg.num_attention_heads);
  }
  const std::string act = optional_value<std::string>(j, "hidden_act", source, "silu");
  TESSEL_CHECK(act == "silu", "{}: hidden_act '{}' is not supported (tessel's llama uses silu)",
               source, act);
  TESSEL_CHECK(!optional_value(j, "use_sliding_window", source, false),
               "{}: use_sliding_window true is not supported (tessel attends to every earlier "
               "position)",
               source);
  TESSEL_CHECK(!optional_value(j, "mlp_bias", source, false),
               "{}: mlp_bias true is not supported (tessel's llama has no biases)", source);
  TESSEL_CHECK(!optional_value(j, "tie_word_embeddings", source, false),
               "{}: tied embeddings (tie_word_embeddings true) are not supported for llama",
               source);
  TESSEL_CHECK(!j.contains("rope_scaling") || j["rope_scaling"].is_null(),
               "{}: rope_scaling is not supported (tessel applies plain RoPE)", source);
  try {
    if (type.moe) moe_from_hf(j, cfg, source);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: {}", source, e.what());
  }
  return cfg;
}

// The model_type follows the attention options and experts (llama_type_of).
nlohmann::json write(const ModelConfig& cfg, const std::string&) {
  const LlamaType& type = llama_type_of(cfg);
  nlohmann::json j = {{"architectures", nlohmann::json::array({type.architecture})},
          {"model_type", type.model_type},
          {"vocab_size", cfg.vocab_size},
          {"hidden_size", cfg.hidden_size},
          {"intermediate_size", cfg.ffn_size()},
          {"num_hidden_layers", cfg.num_layers},
          {"num_attention_heads", cfg.num_attention_heads},
          {"num_key_value_heads", cfg.query_groups()},
          {"head_dim", cfg.head_dim()},
          {"max_position_embeddings", cfg.max_positions()},
          {"rms_norm_eps", json_float(cfg.norm_epsilon)},
          {"rope_theta", json_float(cfg.rotary_base)},
          {"rope_scaling", nullptr},
          {"hidden_act", "silu"},
          {"attention_dropout", json_float(cfg.attention_dropout)},
          {"mlp_bias", false},
          {"initializer_range", json_float(cfg.init_method_std)},
          {"tie_word_embeddings", false},
          {"bos_token_id", 0},
          {"eos_token_id", 0},
          {"torch_dtype", "float32"}};
  if (type.reads_attention_bias) j["attention_bias"] = cfg.add_qkv_bias;
  // Multi-token prediction under DeepSeek-V3's key (Qwen3-Next's as vLLM reads it); its mtp.*
  // tensors keep tessel's names, which transformers' causal LM skips.
  if (cfg.mtp_num_layers > 0) j["num_nextn_predict_layers"] = cfg.mtp_num_layers;
  // Zero-centred norms (--apply-layernorm-1p): the weights hold 1 + w (HfLayout::plain_norms), which
  // transformers reads as a plain Llama; tessel reads its own parametrisation back.
  if (cfg.layernorm_1p) j["tessel_layernorm_1p"] = true;
  if (!is_exact(type, cfg))
    j["tessel_attention"] = {{"add_qkv_bias", cfg.add_qkv_bias}, {"qk_layernorm", cfg.qk_layernorm}};
  if (type.moe) moe_to_hf(cfg, j);
  return j;
}

HfImportRules import_rules(const ModelConfig& cfg, const std::string&) {
  return {.model = "llama", .tied_head = cfg.tied_embeddings(), .plain_norms = true};
}

PlannerSizes planner_sizes(const nlohmann::json& j, const std::string& model_type, const std::string& source) {
  PlannerSizes m;
  read_llama_planner_sizes(j, model_type, source, m);
  read_llama_planner_experts(j, source, m);
  return m;
}

}  // namespace

void read_llama_planner_sizes(const nlohmann::json& j, const std::string& model_type,
                              const std::string& source, PlannerSizes& m) {
  ModelConfig& c = m.cfg;
  c.arch = Arch::Llama;
  c.hidden_dropout = 0.0f;
  c.attention_dropout = optional_value(j, "attention_dropout", source, 0.0f);
  read_sizes(j, source, c);
  c.seq_length = c.max_position_embeddings;
  c.add_qkv_bias = model_type.starts_with("qwen2") || optional_value(j, "attention_bias", source, false);
  c.qk_layernorm = model_type.starts_with("qwen3");
  const int head_dim = optional_value(j, "head_dim", source, 0);
  if (head_dim > 0 && head_dim * c.num_attention_heads != c.hidden_size) c.kv_channels = head_dim;
}

void read_llama_planner_experts(const nlohmann::json& j, const std::string& source, PlannerSizes& m) {
  ModelConfig& c = m.cfg;
  MoeConfig& e = c.moe;
  e.num_experts = optional_value(j, "num_experts", source,
                                 optional_value(j, "num_local_experts", source,
                                                optional_value(j, "n_routed_experts", source, 0)));
  if (e.num_experts == 0) return;
  e.topk = required<int>(j, "num_experts_per_tok", source);
  e.ffn_hidden_size = optional_value(j, "moe_intermediate_size", source, c.ffn_hidden_size);
  e.shared_expert_size = optional_value(j, "shared_expert_intermediate_size", source,
                                        optional_value(j, "n_shared_experts", source, 0) * e.ffn_hidden_size);
  // Qwen2-MoE's shared expert (shared_expert_intermediate_size) is gated; DeepSeek's are not.
  e.shared_expert_gate = j.contains("shared_expert_intermediate_size") && e.shared_expert_size > 0;
  e.score_sigmoid = optional_value<std::string>(j, "scoring_func", source, "softmax") == "sigmoid";
  e.layer_pattern.assign(c.num_layers, 1);
  for (int l = 0; l < std::min(optional_value(j, "first_k_dense_replace", source, 0), c.num_layers); ++l)
    e.layer_pattern[l] = 0;
  for (int l : optional_value(j, "mlp_only_layers", source, std::vector<int>{}))
    if (l >= 0 && l < c.num_layers) e.layer_pattern[l] = 0;
}

const Family& llama_family() {
  static const Family row{
      .name = "llama",
      .model_types = {"llama", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe"},
      .planner_only_types = {"mistral", "mixtral"},
      .writes = [](const ModelConfig& cfg) { return cfg.arch == Arch::Llama && !cfg.linear.enabled(); },
      .writes_what = "llama models without Gated DeltaNet layers",
      .read = read,
      .write = write,
      .export_violations = moe_export_violations,
      .layout = [](const std::string&) { return HfLayout{.plain_norms = true}; },
      .import_rules = import_rules,
      .planner_sizes = planner_sizes,
  };
  return row;
}

}  // namespace tessel
