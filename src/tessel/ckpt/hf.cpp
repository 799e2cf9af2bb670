#include "tessel/ckpt/hf.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tessel/ckpt/hf_json.h"
#include "tessel/ckpt/hf_layout.h"
#include "tessel/ckpt/hf_qwen3_next_config.h"
#include "tessel/core/error.h"
#include "tessel/core/json_values.h"
#include "tessel/core/writable.h"

namespace tessel {

namespace fs = std::filesystem;

namespace {

using hf_json::json_float;
using hf_json::optional_value;
using hf_json::required;

// The Hugging Face model types of tessel's llama architecture, one row each. transformers' Qwen2
// attention always has q/k/v biases and Qwen3's always has q_norm/k_norm; where a type reads
// "attention_bias", true means q/k/v *and* o_proj biases, and tessel has no o_proj bias.
struct LlamaFamilyType {
  const char* model_type;
  const char* architecture;
  bool moe;                  // Qwen-MoE expert keys and names
  bool qkv_bias;             // --add-qkv-bias
  bool qk_layernorm;         // --qk-layernorm
  bool reads_attention_bias;
};
constexpr LlamaFamilyType kLlamaFamily[] = {
    {"llama", "LlamaForCausalLM", false, false, false, true},
    {"qwen2", "Qwen2ForCausalLM", false, true, false, false},
    {"qwen3", "Qwen3ForCausalLM", false, false, true, true},
    {"qwen2_moe", "Qwen2MoeForCausalLM", true, true, false, false},
    {"qwen3_moe", "Qwen3MoeForCausalLM", true, false, true, true},
};

const LlamaFamilyType* find_llama_family(const std::string& model_type) {
  for (const LlamaFamilyType& t : kLlamaFamily)
    if (model_type == t.model_type) return &t;
  return nullptr;
}

// The row for a model: QK-norm makes it Qwen3, q/k/v biases Qwen2, experts the MoE variant. Two
// kinds of model match no row exactly: experts without q/k/v biases (written as qwen2_moe) and
// both options (qwen3 with attention_bias, so with an o_proj bias too). Their Hugging Face
// folders hold fewer tensors than transformers expects; config.json records tessel's options
// under "tessel_attention" so that tessel reads them back as they were.
const LlamaFamilyType& llama_family_of(const ModelConfig& cfg) {
  const bool moe = cfg.moe.num_experts > 0;
  const char* type = cfg.qk_layernorm ? (moe ? "qwen3_moe" : "qwen3")
                     : moe               ? "qwen2_moe"
                     : cfg.add_qkv_bias  ? "qwen2"
                                         : "llama";
  return *find_llama_family(type);
}

bool is_exact(const LlamaFamilyType& t, const ModelConfig& cfg) {
  return t.qkv_bias == cfg.add_qkv_bias && t.qk_layernorm == cfg.qk_layernorm;
}

ModelConfig gpt2_from_hf(const nlohmann::json& j, const std::string& source) {
  ModelConfig cfg;
  cfg.arch = Arch::GPT2;
  cfg.hidden_size = required<int>(j, "n_embd", source);
  cfg.num_layers = required<int>(j, "n_layer", source);
  cfg.num_attention_heads = required<int>(j, "n_head", source);
  cfg.vocab_size = required<int>(j, "vocab_size", source);
  // Old GPT-2 configs also carry n_ctx, equal to n_positions.
  cfg.max_position_embeddings = j.contains("n_positions") ? required<int>(j, "n_positions", source)
                                                          : required<int>(j, "n_ctx", source);
  cfg.ffn_hidden_size = optional_value(j, "n_inner", source, 0);  // null: 4·n_embd
  cfg.norm_epsilon = optional_value(j, "layer_norm_epsilon", source, 1e-5f);
  const std::string act = optional_value<std::string>(j, "activation_function", source, "gelu_new");
  TESSEL_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh",
               "{}: activation_function '{}' is not supported (tessel's gpt2 uses gelu_new)",
               source, act);
  TESSEL_CHECK(optional_value(j, "tie_word_embeddings", source, true),
               "{}: untied embeddings (tie_word_embeddings false) are not supported for gpt2",
               source);
  TESSEL_CHECK(optional_value(j, "scale_attn_weights", source, true),
               "{}: scale_attn_weights false is not supported", source);
  TESSEL_CHECK(!optional_value(j, "scale_attn_by_inverse_layer_idx", source, false),
               "{}: scale_attn_by_inverse_layer_idx is not supported", source);
  TESSEL_CHECK(!optional_value(j, "add_cross_attention", source, false),
               "{}: cross-attention is not supported", source);
  return cfg;
}

ModelConfig llama_from_hf(const nlohmann::json& j, const LlamaFamilyType& type,
                          const std::string& source) {
  ModelConfig cfg;
  cfg.arch = Arch::Llama;
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
  cfg.hidden_size = required<int>(j, "hidden_size", source);
  cfg.num_layers = required<int>(j, "num_hidden_layers", source);
  cfg.num_attention_heads = required<int>(j, "num_attention_heads", source);
  cfg.num_query_groups = optional_value(j, "num_key_value_heads", source, cfg.num_attention_heads);
  cfg.ffn_hidden_size = required<int>(j, "intermediate_size", source);
  cfg.vocab_size = required<int>(j, "vocab_size", source);
  cfg.max_position_embeddings = required<int>(j, "max_position_embeddings", source);
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
  return cfg;
}

}  // namespace

nlohmann::json hf_config_json(const ModelConfig& cfg) {
  if (cfg.linear.enabled()) return qwen3_next_config_json(cfg, kDefaultQwenModelType);
  if (cfg.arch == Arch::GPT2) {
    const bool default_ffn = cfg.ffn_size() == 4 * cfg.hidden_size;
    return {{"architectures", nlohmann::json::array({"GPT2LMHeadModel"})},
            {"model_type", "gpt2"},
            {"vocab_size", cfg.vocab_size},
            {"n_positions", cfg.max_positions()},
            {"n_ctx", cfg.max_positions()},
            {"n_embd", cfg.hidden_size},
            {"n_layer", cfg.num_layers},
            {"n_head", cfg.num_attention_heads},
            {"n_inner", default_ffn ? nlohmann::json(nullptr) : nlohmann::json(cfg.ffn_size())},
            {"activation_function", "gelu_new"},
            {"layer_norm_epsilon", json_float(cfg.norm_epsilon)},
            {"resid_pdrop", 0.0},
            {"embd_pdrop", 0.0},
            {"attn_pdrop", 0.0},
            {"initializer_range", 0.02},
            {"tie_word_embeddings", true},
            // tessel defines no special tokens; 0 keeps the ids inside any vocabulary.
            {"bos_token_id", 0},
            {"eos_token_id", 0},
            {"torch_dtype", "float32"}};
  }
  const LlamaFamilyType& type = llama_family_of(cfg);
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
          {"attention_dropout", 0.0},
          {"mlp_bias", false},
          {"initializer_range", 0.02},
          {"tie_word_embeddings", false},
          {"bos_token_id", 0},
          {"eos_token_id", 0},
          {"torch_dtype", "float32"}};
  if (type.reads_attention_bias) j["attention_bias"] = cfg.add_qkv_bias;
  // Multi-token prediction under DeepSeek-V3's key (Qwen3-Next's as vLLM reads it); its mtp.*
  // tensors keep tessel's names, which transformers' causal LM skips.
  if (cfg.mtp_num_layers > 0) j["num_nextn_predict_layers"] = cfg.mtp_num_layers;
  if (!is_exact(type, cfg))
    j["tessel_attention"] = {{"add_qkv_bias", cfg.add_qkv_bias}, {"qk_layernorm", cfg.qk_layernorm}};
  if (type.moe) moe_to_hf(cfg, j);
  return j;
}

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
                     {"pad_to_capacity", m.pad_to_capacity}};
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
  }
}

ModelConfig model_config_from_hf(const nlohmann::json& j, const std::string& source) {
  TESSEL_CHECK(j.is_object(), "{}: expected a JSON object", source);
  auto type = j.find("model_type");
  TESSEL_CHECK(type != j.end() && type->is_string(),
               "{}: no model_type (not a Hugging Face config.json?)", source);
  const std::string model_type = type->get<std::string>();
  ModelConfig cfg;
  const LlamaFamilyType* llama = find_llama_family(model_type);
  if (model_type == "gpt2") {
    cfg = gpt2_from_hf(j, source);
  } else if (llama != nullptr) {
    cfg = llama_from_hf(j, *llama, source);
    try {
      if (llama->moe) moe_from_hf(j, cfg, source);
    } catch (const nlohmann::json::exception& e) {
      fail("{}: {}", source, e.what());
    }
  } else if (is_qwen3_next_model_type(model_type)) {
    cfg = qwen3_next_config_from_hf(j, source);
  } else {
    fail("{}: model_type '{}' is not supported (tessel reads gpt2, llama, qwen2, qwen3, qwen2_moe, "
         "qwen3_moe, qwen3_next, qwen3_5_moe and qwen3_5_moe_text)",
         source, model_type);
  }
  cfg.seq_length = cfg.max_position_embeddings;
  try {
    cfg.validate();
  } catch (const Error& e) {
    fail("{}: {}", source, e.what());
  }
  return cfg;
}

std::vector<std::string> hf_export_violations(const ModelConfig& cfg) {
  std::vector<std::string> v;
  // A Gated DeltaNet model's config.json records the options its family fixes (tessel_options);
  // its mtp.* the one depth Hugging Face's Qwen3-Next layout has (a dense model's mtp.* tensors
  // go under tessel's names, which config.json does not describe).
  if (cfg.linear.enabled()) {
    if (cfg.mtp_num_layers > 1)
      v.push_back(fmt::format("--mtp-num-layers {}: the Qwen3-Next / Qwen3.5 layout holds one multi-token "
                              "prediction depth (one set of mtp.fc and norms)", cfg.mtp_num_layers));
    return v;
  }
  if (cfg.qk_layernorm && cfg.moe.num_experts > 0 && cfg.moe.shared_expert_size > 0)
    v.push_back("a --qk-layernorm MoE model exports as qwen3_moe, which has no shared expert "
                "(--moe-shared-expert-intermediate-size)");
  if (cfg.moe.num_experts > 0 && cfg.moe.shared_expert_size > 0 && !cfg.moe.shared_expert_gate)
    v.push_back("a shared expert exports as qwen2_moe's, which is gated: add --moe-shared-expert-gate");
  return v;
}

void export_hf(const ParamRegistry& registry, const ModelConfig& cfg, const std::string& dir,
               const std::string& model_type, int64_t max_shard_bytes) {
  const std::vector<std::string> refused = hf_export_violations(cfg);
  TESSEL_CHECK(refused.empty(), "export to {}: {}", dir, refused.front());
  TESSEL_CHECK(model_type.empty() || cfg.linear.enabled(),
               "export to {}: model_type {} is for models with Gated DeltaNet layers", dir, model_type);
  std::error_code ec;
  fs::create_directories(dir, ec);
  TESSEL_CHECK(!ec, "{}: cannot create folder ({})", dir, ec.message());
  const std::string config = (fs::path(dir) / "config.json").string();
  if (cfg.linear.enabled()) {
    const std::string type = model_type.empty() ? kDefaultQwenModelType : model_type;
    write_hf_weights(registry, hf_qwen_layout_for(type), gdn_heads(cfg), dir, max_shard_bytes);
    write_file_atomically(config, qwen3_next_config_json(cfg, type).dump(2) + "\n",
                          Durability::kDurable);
    return;
  }
  write_hf_weights(registry, HfLayout{}, GdnHeads{}, dir, max_shard_bytes);
  write_file_atomically(config, hf_config_json(cfg).dump(2) + "\n", Durability::kDurable);
}

namespace {

// config.json in the folder `path` names (or the folder holding the file `path` names).
std::string config_file_beside(const std::string& path) {
  fs::path dir = fs::is_directory(path) ? fs::path(path) : fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  return (dir / "config.json").string();
}

}  // namespace

std::optional<nlohmann::json> hf_config_json_beside(const std::string& path) {
  const std::string config = config_file_beside(path);
  if (!fs::exists(config)) return std::nullopt;
  std::ifstream in(config);
  TESSEL_CHECK(in.good(), "{}: cannot open", config);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    fail("{}: not valid JSON ({})", config, what);
  }
  return j;
}

std::optional<ModelConfig> hf_config_beside(const std::string& path) {
  const std::optional<nlohmann::json> j = hf_config_json_beside(path);
  if (!j) return std::nullopt;
  return model_config_from_hf(*j, config_file_beside(path));
}

std::string hf_model_type_beside(const std::string& path) {
  const std::optional<nlohmann::json> j = hf_config_json_beside(path);
  if (!j || !j->is_object() || !j->contains("model_type") || !(*j)["model_type"].is_string()) return "";
  return (*j)["model_type"].get<std::string>();
}

}  // namespace tessel
