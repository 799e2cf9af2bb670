// GPT-2 (transformers' GPT2LMHeadModel): learned positions, LayerNorm, a GELU MLP (GPT-2's own
// gelu_new, or the exact "gelu" of Megatron's default GPT), tied embeddings. Weights under tessel's names; GPT-2's own files omit "transformer.".
#include <nlohmann/json.hpp>

#include "tessel/core/error.h"
#include "tessel/family/config_json.h"
#include "tessel/family/family.h"

namespace tessel {

namespace {

using config_json::json_float;
using config_json::optional_value;
using config_json::required;

ModelConfig read(const nlohmann::json& j, const std::string&, const std::string& source) {
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
  // Dropout as the file names it (resid_pdrop: the residual branches; embd_pdrop: tessel keys the
  // embedding's by the same --hidden-dropout, as Megatron).
  cfg.hidden_dropout = optional_value(j, "resid_pdrop", source, 0.0f);
  cfg.attention_dropout = optional_value(j, "attn_pdrop", source, 0.0f);
  const std::string act = optional_value<std::string>(j, "activation_function", source, "gelu_new");
  TESSEL_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu",
               "{}: activation_function '{}' is not supported (tessel's gpt2 has gelu, gelu_new or "
               "gelu_pytorch_tanh)",
               source, act);
  cfg.openai_gelu = act != "gelu";  // the tanh forms
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

nlohmann::json write(const ModelConfig& cfg, const std::string&) {
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
          {"activation_function", cfg.openai_gelu ? "gelu_new" : "gelu"},
          {"layer_norm_epsilon", json_float(cfg.norm_epsilon)},
          {"resid_pdrop", json_float(cfg.hidden_dropout)},
          {"embd_pdrop", json_float(cfg.hidden_dropout)},
          {"attn_pdrop", json_float(cfg.attention_dropout)},
          {"initializer_range", json_float(cfg.init_method_std)},
          {"tie_word_embeddings", true},
          // tessel defines no special tokens; 0 keeps the ids inside any vocabulary.
          {"bos_token_id", 0},
          {"eos_token_id", 0},
          {"torch_dtype", "float32"}};
}

HfImportRules import_rules(const ModelConfig& cfg, const std::string&) {
  return {.model = "gpt2", .gpt2_bare_names = true, .tied_head = cfg.tied_embeddings()};
}

// The planner reads the dropout a GPT-2 config names (Megatron keeps a mask for it).
PlannerSizes planner_sizes(const nlohmann::json& j, const std::string&, const std::string& source) {
  PlannerSizes m;
  ModelConfig& c = m.cfg;
  c.arch = Arch::GPT2;
  c.hidden_size = required<int>(j, "n_embd", source);
  c.num_layers = required<int>(j, "n_layer", source);
  c.num_attention_heads = required<int>(j, "n_head", source);
  c.ffn_hidden_size = optional_value(j, "n_inner", source, 0);
  c.vocab_size = required<int>(j, "vocab_size", source);
  c.max_position_embeddings = required<int>(j, "n_positions", source);
  c.seq_length = c.max_position_embeddings;
  c.hidden_dropout = optional_value(j, "resid_pdrop", source, 0.0f);
  c.attention_dropout = optional_value(j, "attn_pdrop", source, 0.0f);
  return m;
}

}  // namespace

const Family& gpt2_family() {
  static const Family row{
      .name = "gpt2",
      .model_types = {"gpt2"},
      .writes = [](const ModelConfig& cfg) { return cfg.arch == Arch::GPT2 && !cfg.linear.enabled(); },
      .writes_what = "gpt2 models",
      .read = read,
      .write = write,
      // Experts are llama's (train/plan.cpp); these rules find nothing without them.
      .export_violations = moe_export_violations,
      .layout = [](const std::string&) { return HfLayout{}; },
      .import_rules = import_rules,
      .planner_sizes = planner_sizes,
  };
  return row;
}

}  // namespace tessel
