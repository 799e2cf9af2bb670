#include "tessel/family/qwen3_next.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "tessel/core/error.h"
#include "tessel/family/config_json.h"
#include "tessel/family/family.h"

namespace tessel {

using config_json::json_float;
using config_json::optional_value;
using config_json::required;

namespace {

constexpr const char* kModelTypes[] = {"qwen3_next", "qwen3_5_moe", "qwen3_5_moe_text"};

// What a Gated DeltaNet model is written as when nothing asks otherwise: the decoder alone in
// tessel's own layout (flat GDN projections), so a checkpoint's description needs no choice.
constexpr const char* kDefaultModelType = "qwen3_5_moe_text";

bool is_qwen3_next_model_type(const std::string& t) {
  return std::find(std::begin(kModelTypes), std::end(kModelTypes), t) != std::end(kModelTypes);
}

// The options every model of these families has; a tessel model that differs records its own.
struct FamilyOptions {
  bool qk_layernorm, layernorm_1p, add_qkv_bias, attention_output_gate, shared_expert_gate;
  bool operator==(const FamilyOptions&) const = default;
};

FamilyOptions options_of(const ModelConfig& cfg) {
  return {cfg.qk_layernorm, cfg.layernorm_1p, cfg.add_qkv_bias, cfg.attention_output_gate,
          cfg.moe.shared_expert_gate};
}

FamilyOptions family_options(const ModelConfig& cfg) {
  return {true, true, false, true, cfg.moe.num_experts > 0 && cfg.moe.shared_expert_size > 0};
}

void set_options(ModelConfig& cfg, const FamilyOptions& o) {
  cfg.qk_layernorm = o.qk_layernorm;
  cfg.layernorm_1p = o.layernorm_1p;
  cfg.add_qkv_bias = o.add_qkv_bias;
  cfg.attention_output_gate = o.attention_output_gate;
  cfg.moe.shared_expert_gate = o.shared_expert_gate;
}

// layer_types, or full_attention_interval's pattern (layer i is full attention iff (i+1) % N == 0).
std::vector<int> linear_layers_from_hf(const nlohmann::json& text, int num_layers,
                                       const std::string& source) {
  std::vector<int> pattern;
  auto types = text.find("layer_types");
  if (types == text.end() || types->is_null()) {
    const int interval = optional_value(text, "full_attention_interval", source, 4);
    TESSEL_CHECK(interval >= 1, "{}: full_attention_interval {} is not positive", source, interval);
    for (int i = 0; i < num_layers; ++i) pattern.push_back((i + 1) % interval == 0 ? 0 : 1);
    return pattern;
  }
  TESSEL_CHECK(types->is_array() && static_cast<int>(types->size()) == num_layers,
               "{}: layer_types is not a list of {} entries (num_hidden_layers)", source, num_layers);
  for (const nlohmann::json& t : *types) {
    const std::string s = t.is_string() ? t.get<std::string>() : t.dump();
    TESSEL_CHECK(s == "linear_attention" || s == "full_attention",
                 "{}: layer_types holds '{}' (each is linear_attention or full_attention)", source, s);
    pattern.push_back(s == "linear_attention" ? 1 : 0);
  }
  return pattern;
}

void refuse_unsupported(const nlohmann::json& top, const nlohmann::json& text,
                        const std::string& source) {
  const std::string act = optional_value<std::string>(text, "hidden_act", source, "silu");
  TESSEL_CHECK(act == "silu", "{}: hidden_act '{}' is not supported (only silu)", source, act);
  TESSEL_CHECK(!optional_value(text, "attention_bias", source, false),
               "{}: attention_bias true is not supported (tessel's attention has no o_proj bias)",
               source);
  TESSEL_CHECK(!optional_value(top, "tie_word_embeddings", source,
                               optional_value(text, "tie_word_embeddings", source, false)),
               "{}: tied embeddings (tie_word_embeddings true) are not supported", source);
  TESSEL_CHECK(!optional_value(text, "mtp_use_dedicated_embeddings", source, false),
               "{}: mtp_use_dedicated_embeddings true is not supported (the MTP layer shares the "
               "embedding)",
               source);
  TESSEL_CHECK(optional_value(text, "decoder_sparse_step", source, 1) == 1,
               "{}: decoder_sparse_step {} is not supported (MoE layers are chosen by "
               "mlp_only_layers)",
               source, text["decoder_sparse_step"].dump());
  TESSEL_CHECK(!text.contains("rope_scaling") || text["rope_scaling"].is_null(),
               "{}: rope_scaling is not supported (tessel applies plain RoPE)", source);
}

// The sizes of a config.json whose model_type is one of the three. Settings tessel cannot
// reproduce (RoPE scaling, another activation, attention biases, tied or dedicated MTP
// embeddings, decoder_sparse_step other than 1) and missing sizes are errors naming `file` (and
// "text_config" inside a qwen3_5_moe file). MTP layers from mtp_num_hidden_layers (Qwen3.5) or
// num_nextn_predict_layers (Qwen3-Next, as vLLM reads it), none when absent; more than one is
// refused (Hugging Face's layout has one set of mtp.fc and norms).
ModelConfig read(const nlohmann::json& j, const std::string& model_type, const std::string& file) {
  const nlohmann::json* text = &j;
  std::string source = file;
  if (model_type == "qwen3_5_moe") {
    auto it = j.find("text_config");
    TESSEL_CHECK(it != j.end() && it->is_object(), "{}: missing key 'text_config'", file);
    text = &*it;
    source = file + ": text_config";
  }
  const nlohmann::json& t = *text;
  refuse_unsupported(j, t, source);
  ModelConfig cfg;
  cfg.arch = Arch::Llama;
  cfg.hidden_dropout = 0.0f;  // attention dropout only, as Hugging Face's Llama
  cfg.attention_dropout = optional_value(t, "attention_dropout", source, 0.0f);
  cfg.hidden_size = required<int>(t, "hidden_size", source);
  cfg.num_layers = required<int>(t, "num_hidden_layers", source);
  cfg.num_attention_heads = required<int>(t, "num_attention_heads", source);
  cfg.num_query_groups = required<int>(t, "num_key_value_heads", source);
  const int head_dim = required<int>(t, "head_dim", source);
  // --kv-channels only when the head dimension is not hidden / heads (0 means that).
  cfg.kv_channels = head_dim * cfg.num_attention_heads == cfg.hidden_size ? 0 : head_dim;
  cfg.vocab_size = required<int>(t, "vocab_size", source);
  cfg.max_position_embeddings = optional_value(t, "max_position_embeddings", source, 32768);
  cfg.ffn_hidden_size = optional_value(t, "intermediate_size", source, 0);
  cfg.norm_epsilon = optional_value(t, "rms_norm_eps", source, 1e-6f);
  // transformers v5 keeps RoPE's settings in rope_parameters, v4 at the top level.
  const nlohmann::json rope = t.contains("rope_parameters") && t["rope_parameters"].is_object()
                                  ? t["rope_parameters"]
                                  : nlohmann::json::object();
  const std::string rope_type = optional_value<std::string>(rope, "rope_type", source, "default");
  TESSEL_CHECK(rope_type == "default", "{}: rope_type '{}' is not supported (tessel applies plain RoPE)",
               source, rope_type);
  cfg.rotary_base =
      optional_value(rope, "rope_theta", source, optional_value(t, "rope_theta", source, 10000.0f));
  cfg.rotary_percent = optional_value(
      rope, "partial_rotary_factor", source, optional_value(t, "partial_rotary_factor", source, 0.25f));

  LinearAttentionConfig& g = cfg.linear;
  g.conv_kernel_dim = required<int>(t, "linear_conv_kernel_dim", source);
  g.key_head_dim = required<int>(t, "linear_key_head_dim", source);
  g.value_head_dim = required<int>(t, "linear_value_head_dim", source);
  g.num_key_heads = required<int>(t, "linear_num_key_heads", source);
  g.num_value_heads = required<int>(t, "linear_num_value_heads", source);
  if (cfg.num_layers > 0) g.layer_pattern = linear_layers_from_hf(t, cfg.num_layers, source);
  // Multi-token prediction: Qwen3.5's mtp_num_hidden_layers, vLLM's num_nextn_predict_layers for
  // Qwen3-Next; absent: none (transformers' causal LM skips mtp.* weights). Hugging Face's layout
  // holds one set of fc and norms, Megatron's D depths one each: one depth only.
  cfg.mtp_num_layers = optional_value(t, "mtp_num_hidden_layers", source,
                                      optional_value(t, "num_nextn_predict_layers", source, 0));
  TESSEL_CHECK(cfg.mtp_num_layers <= 1,
               "{}: {} multi-token prediction layers are not supported (the Hugging Face layout has one "
               "set of mtp.fc and norms, Megatron's depths one each: at most 1)",
               source, cfg.mtp_num_layers);

  // num_experts 0 makes every layer a dense MLP of intermediate_size, as the modelling code does.
  if (required<int>(t, "num_experts", source) > 0) {
    try {
      moe_from_hf(t, cfg, source);
    } catch (const nlohmann::json::exception& e) {
      fail("{}: {}", source, e.what());
    }
  }
  // Qwen3-Next's router renormalises its top-k by default; Qwen3.5's always does (the key is gone).
  cfg.moe.pre_softmax =
      model_type == "qwen3_next"
          ? !optional_value(t, "norm_topk_prob", source, true)
          : t.contains("tessel_moe") && optional_value(t["tessel_moe"], "pre_softmax", source, false);

  FamilyOptions o = family_options(cfg);
  if (model_type != "qwen3_next") o.attention_output_gate = optional_value(t, "attn_output_gate", source, true);
  if (auto own = t.find("tessel_options"); own != t.end()) {
    o.qk_layernorm = required<bool>(*own, "qk_layernorm", source);
    o.layernorm_1p = required<bool>(*own, "layernorm_1p", source);
    o.add_qkv_bias = required<bool>(*own, "add_qkv_bias", source);
    o.attention_output_gate = required<bool>(*own, "attention_output_gate", source);
    o.shared_expert_gate = required<bool>(*own, "shared_expert_gate", source);
  }
  set_options(cfg, o);
  return cfg;
}

}  // namespace

nlohmann::json qwen3_next_config_json(const ModelConfig& cfg, const std::string& model_type) {
  TESSEL_CHECK(is_qwen3_next_model_type(model_type),
               "model_type '{}' is not qwen3_next, qwen3_5_moe or qwen3_5_moe_text", model_type);
  TESSEL_CHECK(cfg.linear.enabled(), "a {} config.json needs Gated DeltaNet layers", model_type);
  nlohmann::json layer_types = nlohmann::json::array();
  for (int l = 0; l < cfg.num_layers; ++l)
    layer_types.push_back(cfg.linear.is_linear_layer(l) ? "linear_attention" : "full_attention");
  const LinearAttentionConfig& g = cfg.linear;
  nlohmann::json t = {{"vocab_size", cfg.vocab_size},
                      {"hidden_size", cfg.hidden_size},
                      {"num_hidden_layers", cfg.num_layers},
                      {"num_attention_heads", cfg.num_attention_heads},
                      {"num_key_value_heads", cfg.query_groups()},
                      {"head_dim", cfg.head_dim()},
                      {"linear_conv_kernel_dim", g.conv_kernel_dim},
                      {"linear_key_head_dim", g.key_head_dim},
                      {"linear_value_head_dim", g.value_head_dim},
                      {"linear_num_key_heads", g.num_key_heads},
                      {"linear_num_value_heads", g.num_value_heads},
                      {"layer_types", layer_types},
                      {"max_position_embeddings", cfg.max_positions()},
                      {"rms_norm_eps", json_float(cfg.norm_epsilon)},
                      {"rope_parameters",
                       {{"rope_type", "default"},
                        {"rope_theta", json_float(cfg.rotary_base)},
                        {"partial_rotary_factor", json_float(cfg.rotary_percent)}}},
                      {"hidden_act", "silu"},
                      {"attention_bias", false},
                      {"attention_dropout", json_float(cfg.attention_dropout)},
                      {"initializer_range", json_float(cfg.init_method_std)},
                      {"tie_word_embeddings", false},
                      {"bos_token_id", 0},
                      {"eos_token_id", 0},
                      {"torch_dtype", "float32"}};
  // Dense (mlp_only) layers' size, when set: Qwen3.5 deleted the key, Qwen3-Next ships 5120.
  if (cfg.ffn_hidden_size > 0) t["intermediate_size"] = cfg.ffn_hidden_size;
  if (cfg.moe.num_experts > 0) {
    moe_to_hf(cfg, t);
  } else {
    t["num_experts"] = 0;
  }
  if (options_of(cfg) != family_options(cfg))
    t["tessel_options"] = {{"qk_layernorm", cfg.qk_layernorm},
                           {"layernorm_1p", cfg.layernorm_1p},
                           {"add_qkv_bias", cfg.add_qkv_bias},
                           {"attention_output_gate", cfg.attention_output_gate},
                           {"shared_expert_gate", cfg.moe.shared_expert_gate}};
  if (model_type == "qwen3_next") {
    // transformers v4's Qwen3NextConfig reads RoPE's settings at the top level.
    t["rope_theta"] = json_float(cfg.rotary_base);
    t["partial_rotary_factor"] = json_float(cfg.rotary_percent);
    t["num_nextn_predict_layers"] = cfg.mtp_num_layers;
    t["model_type"] = "qwen3_next";
    t["architectures"] = nlohmann::json::array({"Qwen3NextForCausalLM"});
    return t;
  }
  t.erase("norm_topk_prob");  // Qwen3.5 always renormalises; tessel_moe's pre_softmax says if not
  t["attn_output_gate"] = cfg.attention_output_gate;
  t["mtp_num_hidden_layers"] = cfg.mtp_num_layers;
  t["mtp_use_dedicated_embeddings"] = false;
  t["model_type"] = "qwen3_5_moe_text";
  if (model_type == "qwen3_5_moe_text") {
    t["architectures"] = nlohmann::json::array({"Qwen3_5MoeForCausalLM"});
    return t;
  }
  return {{"model_type", "qwen3_5_moe"},
          {"architectures", nlohmann::json::array({"Qwen3_5MoeForConditionalGeneration"})},
          {"tie_word_embeddings", false},
          {"torch_dtype", "float32"},
          {"text_config", t}};
}

namespace {

// The layout each family's published checkpoints use: qwen3_next grouped in_proj_qkvz /
// in_proj_ba with per-expert experts; qwen3_5_moe flat projections, packed experts in the
// decoder, per-expert MTP experts, the decoder under model.language_model.; qwen3_5_moe_text the
// same without the prefix.
HfLayout layout(const std::string& requested) {
  const std::string model_type = requested.empty() ? kDefaultModelType : requested;
  TESSEL_CHECK(is_qwen3_next_model_type(model_type),
               "model_type '{}' is not qwen3_next, qwen3_5_moe or qwen3_5_moe_text", model_type);
  if (model_type == "qwen3_next") return {.grouped_gdn = true};
  return {.packed_experts = true, .vl_prefix = model_type == "qwen3_5_moe"};
}

nlohmann::json write(const ModelConfig& cfg, const std::string& model_type) {
  return qwen3_next_config_json(cfg, model_type.empty() ? kDefaultModelType : model_type);
}

// config.json records what the family fixes (tessel_options); its mtp.* the one depth Hugging
// Face's Qwen3-Next layout has.
std::vector<std::string> export_violations(const ModelConfig& cfg) {
  std::vector<std::string> v;
  if (cfg.mtp_num_layers > 1)
    v.push_back(fmt::format("--mtp-num-layers {}: the Qwen3-Next / Qwen3.5 layout holds one multi-token "
                            "prediction depth (one set of mtp.fc and norms)", cfg.mtp_num_layers));
  return v;
}

// `model_type` decides which GDN projections the files must hold (ckpt/hf_import.cpp).
HfImportRules import_rules(const ModelConfig& cfg, const std::string& model_type) {
  return {.model = "Qwen3-Next", .tied_head = cfg.tied_embeddings(), .qwen_extras = true,
          .family = model_type, .heads = gdn_heads(cfg)};
}

// The importer's reader (it refuses what tessel cannot build, such as RoPE scaling); MTP layers as
// the published checkpoints carry them: Qwen3.5's mtp_num_hidden_layers, Qwen3-Next's
// num_nextn_predict_layers (absent from its config.json: vLLM's default, 1).
PlannerSizes planner_sizes(const nlohmann::json& j, const std::string& model_type, const std::string& source) {
  PlannerSizes m;
  ModelConfig& c = m.cfg;
  c = read(j, model_type, source);
  c.seq_length = c.max_position_embeddings;
  const nlohmann::json& text = model_type == "qwen3_5_moe" ? j.at("text_config") : j;
  c.mtp_num_layers = model_type == "qwen3_next" ? optional_value(text, "num_nextn_predict_layers", source, 1)
                                                : optional_value(text, "mtp_num_hidden_layers", source, 0);
  return m;
}

}  // namespace

const Family& qwen3_next_family() {
  static const Family row{
      .name = "qwen3_next",
      .model_types = {std::begin(kModelTypes), std::end(kModelTypes)},
      .export_types = {std::begin(kModelTypes), std::end(kModelTypes)},
      .writes = [](const ModelConfig& cfg) { return cfg.linear.enabled(); },
      .writes_what = "models with Gated DeltaNet layers",
      .read = read,
      .write = write,
      .export_violations = export_violations,
      .layout = layout,
      .import_rules = import_rules,
      .planner_sizes = planner_sizes,
  };
  return row;
}

}  // namespace tessel
