#include "tessel/model/config.h"

#include <fmt/format.h>

#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tessel/core/json_values.h"

#include "tessel/core/error.h"

namespace tessel {

std::string arch_name(Arch arch) { return arch == Arch::GPT2 ? "gpt2" : "llama"; }

Arch parse_arch(const std::string& name) {
  if (name == "gpt2") return Arch::GPT2;
  if (name == "llama") return Arch::Llama;
  fail("unknown architecture '{}' (expected gpt2 or llama)", name);
}

int ModelConfig::ffn_size() const {
  if (ffn_hidden_size > 0) return ffn_hidden_size;
  if (arch == Arch::GPT2) return 4 * hidden_size;
  // Megatron's rule with SwiGLU: 2/3 of 4·hidden (two up projections), down to a multiple of 64.
  return static_cast<int>(4.0 * hidden_size * 2.0 / 3.0 / 64.0) * 64;
}

std::vector<std::string> ModelConfig::violations() const {
  std::vector<std::string> v;
  auto positive = [&](const char* flag, int value) {
    if (value <= 0) v.push_back(fmt::format("{} must be positive (got {})", flag, value));
  };
  positive("--num-layers", num_layers);
  positive("--hidden-size", hidden_size);
  positive("--num-attention-heads", num_attention_heads);
  positive("--seq-length", seq_length);
  positive("--vocab-size", vocab_size);
  // Sizes far past any model's (8 times the largest published where there is one), refused before
  // a product of two overflows or a build asks for terabytes: the other rules compute with them.
  const size_t before = v.size();
  auto at_most = [&](const char* flag, int value, int bound) {
    if (value > bound) v.push_back(fmt::format("{} {} is past tessel's bound of {}", flag, value, bound));
  };
  at_most("--num-layers", num_layers, 1 << 16);
  at_most("--mtp-num-layers", mtp_num_layers, 1 << 16);
  at_most("--hidden-size", hidden_size, 1 << 17);
  at_most("--ffn-hidden-size", ffn_hidden_size, 1 << 20);
  at_most("--num-attention-heads", num_attention_heads, 1 << 14);
  at_most("--num-query-groups", num_query_groups, 1 << 14);
  at_most("--kv-channels", kv_channels, 1 << 16);
  at_most("--seq-length", seq_length, 1 << 24);
  at_most("--max-position-embeddings", max_position_embeddings, 1 << 24);
  at_most("--vocab-size", vocab_size, 1 << 24);
  at_most("--num-experts", moe.num_experts, 1 << 16);
  at_most("--moe-ffn-hidden-size", moe.ffn_hidden_size, 1 << 20);
  at_most("--moe-shared-expert-intermediate-size", moe.shared_expert_size, 1 << 20);
  at_most("--linear-key-head-dim", linear.key_head_dim, 1 << 16);
  at_most("--linear-value-head-dim", linear.value_head_dim, 1 << 16);
  at_most("--linear-num-key-heads", linear.num_key_heads, 1 << 14);
  at_most("--linear-num-value-heads", linear.num_value_heads, 1 << 14);
  at_most("--linear-conv-kernel-dim", linear.conv_kernel_dim, 1 << 10);
  if (v.size() > before) return v;
  for (auto [flag, p] : {std::pair{"--hidden-dropout", hidden_dropout}, {"--attention-dropout", attention_dropout}})
    if (!(p >= 0.0f && p < 1.0f)) v.push_back(fmt::format("{} {} must be in [0, 1)", flag, p));
  if (kv_channels < 0) v.push_back(fmt::format("--kv-channels {} must not be negative", kv_channels));
  if (num_attention_heads > 0 && kv_channels == 0 && hidden_size % num_attention_heads != 0)
    v.push_back(fmt::format("--hidden-size {} is not divisible by --num-attention-heads {}",
                            hidden_size, num_attention_heads));
  if (num_query_groups < 0) v.push_back("--num-query-groups must not be negative");
  if (num_query_groups > 0 && num_attention_heads % num_query_groups != 0)
    v.push_back(fmt::format("--num-attention-heads {} is not divisible by --num-query-groups {}",
                            num_attention_heads, num_query_groups));
  if (arch == Arch::GPT2 && num_query_groups > 0 && num_query_groups != num_attention_heads)
    v.push_back("--num-query-groups (grouped-query attention) needs --arch llama");
  if (ffn_hidden_size < 0) v.push_back("--ffn-hidden-size must not be negative");
  else if (hidden_size > 0 && ffn_size() <= 0 && uses_dense_ffn_size())
    v.push_back("--ffn-hidden-size is needed: the default (2/3 of 4·hidden, a multiple of 64) is 0");
  if (max_position_embeddings > 0 && max_position_embeddings < seq_length)
    v.push_back(fmt::format("--max-position-embeddings {} is smaller than --seq-length {}",
                            max_position_embeddings, seq_length));
  const bool head_dim_known = num_attention_heads > 0 && kv_channels >= 0 &&
                              (kv_channels > 0 || hidden_size % num_attention_heads == 0);
  if (!(rotary_percent > 0 && rotary_percent <= 1))
    v.push_back(fmt::format("--rotary-percent {} must be in (0, 1]", rotary_percent));
  else if (arch == Arch::Llama && head_dim_known && rotary_dim() % 2 != 0)
    v.push_back(rotary_percent == 1.0f
                    ? fmt::format("RoPE needs an even head dimension (got {})", head_dim())
                    : fmt::format("RoPE needs an even rotary dimension: int(head dim {} × --rotary-percent "
                                  "{}) = {}", head_dim(), rotary_percent, rotary_dim()));
  else if (arch == Arch::Llama && head_dim_known && rotary_dim() == 0)
    v.push_back(fmt::format("--rotary-percent {} rotates no dimension of head dim {}", rotary_percent,
                            head_dim()));
  if (arch == Arch::GPT2 && add_qkv_bias)
    v.push_back("--add-qkv-bias needs --arch llama (gpt2's fused c_attn always has a bias)");
  if (arch == Arch::GPT2 && qk_layernorm) v.push_back("--qk-layernorm needs --arch llama");
  // Qwen3-Next's settings are the llama architecture's.
  auto llama_only = [&](bool set, const char* what) {
    if (arch == Arch::GPT2 && set) v.push_back(fmt::format("{} needs --arch llama", what));
  };
  llama_only(linear.enabled(), "--experimental-attention-variant gdn");
  llama_only(attention_output_gate, "--attention-output-gate");
  llama_only(layernorm_1p, "--apply-layernorm-1p");
  llama_only(rotary_percent != 1.0f, "--rotary-percent below 1");
  llama_only(rotary_base != 10000.0f, "--rotary-base other than 10000");
  llama_only(mtp_num_layers > 0, "--mtp-num-layers");
  if (arch == Arch::Llama && openai_gelu)
    v.push_back("--openai-gelu needs a GELU MLP (gpt2): llama's MLP is SwiGLU");
  if (!(init_method_std > 0)) v.push_back(fmt::format("--init-method-std {} must be positive", init_method_std));
  if (attention_output_gate && add_qkv_bias)
    v.push_back("--attention-output-gate takes no --add-qkv-bias (Qwen3-Next's q_proj has no bias)");
  if (arch == Arch::GPT2 && kv_channels > 0 && num_attention_heads > 0 &&
      kv_channels * num_attention_heads != hidden_size)
    v.push_back(fmt::format("--kv-channels {} needs --arch llama (gpt2's heads are hidden / heads = {})",
                            kv_channels, num_attention_heads > 0 ? hidden_size / num_attention_heads : 0));
  if (linear.enabled()) {
    for (std::string& m : linear.violations(num_layers)) v.push_back(std::move(m));
  }
  if (mtp_num_layers < 0) v.push_back(fmt::format("--mtp-num-layers {} must not be negative", mtp_num_layers));
  // Depth k's targets are the sequence's shifted k + 1 to the left (model/mtp.h): the last depth
  // predicts seq_length − D positions, none when the sequence is no longer than D.
  if (mtp_num_layers > 0 && seq_length > 0 && seq_length <= mtp_num_layers)
    v.push_back(fmt::format("--mtp-num-layers {} needs --seq-length above it: a sequence of {} leaves depth {} "
                            "no token to predict", mtp_num_layers, seq_length, seq_length));
  if (mtp_num_layers > 0 && !(mtp_loss_scaling_factor > 0))
    v.push_back(fmt::format("--mtp-loss-scaling-factor {} must be positive with --mtp-num-layers (a weight of 0 "
                            "trains the MTP layers nothing)", mtp_loss_scaling_factor));
  else if (!(mtp_loss_scaling_factor >= 0))
    v.push_back(fmt::format("--mtp-loss-scaling-factor {} must not be negative", mtp_loss_scaling_factor));
  // Megatron builds the MTP layer from the last decoder layer's spec; Qwen3-Next's is attention.
  if (mtp_num_layers > 0 && linear.enabled() && num_layers > 0 &&
      static_cast<int>(linear.layer_pattern.size()) == num_layers && linear.is_linear_layer(num_layers - 1))
    v.push_back(fmt::format("--mtp-num-layers builds its layers as the last decoder layer, which "
                            "--linear-attention-freq makes Gated DeltaNet (layer {}): the MTP layers are "
                            "full attention (Qwen3-Next's)", num_layers - 1));
  if (moe.shared_expert_gate && (moe.num_experts == 0 || moe.shared_expert_size == 0))
    v.push_back("--moe-shared-expert-gate needs a shared expert (--num-experts and "
                "--moe-shared-expert-intermediate-size)");
  if (!(norm_epsilon > 0)) v.push_back("--norm-epsilon must be positive");
  if (!(rotary_base > 0)) v.push_back("--rotary-base must be positive");
  if (make_vocab_size_divisible_by <= 0) v.push_back("--make-vocab-size-divisible-by must be positive");
  return v;
}

std::vector<std::string> LinearAttentionConfig::violations(int num_layers) const {
  std::vector<std::string> v;
  auto positive = [&](const char* flag, int value) {
    if (value <= 0) v.push_back(fmt::format("{} {} must be positive", flag, value));
  };
  positive("--linear-conv-kernel-dim", conv_kernel_dim);
  positive("--linear-key-head-dim", key_head_dim);
  positive("--linear-value-head-dim", value_head_dim);
  positive("--linear-num-key-heads", num_key_heads);
  positive("--linear-num-value-heads", num_value_heads);
  if (num_key_heads > 0 && num_value_heads > 0 && num_value_heads % num_key_heads != 0)
    v.push_back(fmt::format("--linear-num-value-heads {} is not a multiple of --linear-num-key-heads {}",
                            num_value_heads, num_key_heads));
  if (static_cast<int>(layer_pattern.size()) != num_layers)
    v.push_back(fmt::format("--linear-attention-freq has {} entries for {} layers (--num-layers)",
                            layer_pattern.size(), num_layers));
  if (std::any_of(layer_pattern.begin(), layer_pattern.end(), [](int p) { return p != 0 && p != 1; }))
    v.push_back("--linear-attention-freq entries must be 0 or 1");
  return v;
}

ModelConfig ModelConfig::explicit_sizes() const {
  ModelConfig c = *this;
  if (num_attention_heads > 0) c.kv_channels = head_dim();
  c.num_query_groups = query_groups();
  c.ffn_hidden_size = ffn_size();
  c.max_position_embeddings = max_positions();
  if (c.moe.ffn_hidden_size == 0) c.moe.ffn_hidden_size = c.ffn_hidden_size;
  return c;
}

void ModelConfig::validate() const {
  std::vector<std::string> v = violations();
  if (v.empty()) return;
  std::string msg = "invalid model config: " + v[0];
  for (size_t i = 1; i < v.size(); ++i) msg += "; " + v[i];
  throw Error(msg);
}

int64_t ModelConfig::num_parameters() const {
  int64_t C = hidden_size, V = vocab_size, F = ffn_size(), L = num_layers;
  int64_t kv = static_cast<int64_t>(query_groups()) * head_dim();
  if (arch == Arch::GPT2) {
    int64_t layer = 2 * 2 * C + C * 3 * C + 3 * C + C * C + C + C * F + F + F * C + C;
    return V * C + static_cast<int64_t>(max_positions()) * C + L * layer + 2 * C;
  }
  const int64_t HD = static_cast<int64_t>(num_attention_heads) * head_dim();
  const int64_t attention = C * HD * (attention_output_gate ? 2 : 1) + 2 * C * kv + HD * C  // q, k, v, o
                            + (add_qkv_bias ? HD + 2 * kv : 0) + (qk_layernorm ? 2 * head_dim() : 0);
  const LinearAttentionConfig& la = linear;
  const int64_t gdn = la.conv_dim() * C + la.value_dim() * C + 2 * la.num_value_heads * C  // qkv, z, b, a
                      + la.conv_dim() * la.conv_kernel_dim + 2 * la.num_value_heads  // conv, dt_bias, A_log
                      + la.value_head_dim + C * la.value_dim();                       // norm, out_proj
  // The MLP of a layer (its MoE block's when the pattern says so), norms included.
  auto mlp = [&](int layer) -> int64_t {
    if (!moe.is_moe_layer(layer)) return 2 * C + 3 * C * F;
    const int64_t E = moe.num_experts, Fe = moe.ffn_hidden_size > 0 ? moe.ffn_hidden_size : F;
    const int64_t S = moe.shared_expert_size;
    return 2 * C + E * C + E * 3 * C * Fe + (S > 0 ? 3 * C * S : 0) + (moe.shared_expert_gate ? C : 0);
  };
  int64_t total = 2 * V * C + C;
  for (int l = 0; l < num_layers; ++l) total += (linear.is_linear_layer(l) ? gdn : attention) + mlp(l);
  // Each MTP layer: two input norms, fc [C, 2C], a full-attention layer with the last layer's MLP,
  // its final norm.
  total += mtp_num_layers * (2 * C + 2 * C * C + attention + mlp(num_layers - 1) + C);
  return total;
}

std::string ModelConfig::layer_prefix(int layer) const {
  return layer < num_layers ? fmt::format("model.layers.{}.", layer)
                            : fmt::format("mtp.layers.{}.", layer - num_layers);
}

namespace {

template <typename... Fn>
struct Overloaded : Fn... {
  using Fn::operator()...;
};
template <typename... Fn>
Overloaded(Fn...) -> Overloaded<Fn...>;

constexpr bool kRunSetting = true;  // ModelField::run_setting

// The defaults and meanings are Megatron's; the help is what `--help` prints.
const ModelField kModelFields[] = {
    {"--arch", &ModelConfig::arch, "gpt2 | llama"},
    {"--num-layers", &ModelConfig::num_layers, "Transformer layers"},
    {"--hidden-size", &ModelConfig::hidden_size, "hidden size"},
    {"--num-attention-heads", &ModelConfig::num_attention_heads, "attention heads"},
    {"--num-query-groups", &ModelConfig::num_query_groups, "key/value heads (GQA, llama; 0: one per head)"},
    {"--ffn-hidden-size", &ModelConfig::ffn_hidden_size,
     "MLP hidden size (0: 4·hidden; llama: 8/3·hidden, down to a multiple of 64)"},
    {"--seq-length", &ModelConfig::seq_length, "sequence length", kRunSetting},
    {"--max-position-embeddings", &ModelConfig::max_position_embeddings,
     "maximum positions (0: --seq-length)"},
    {"--vocab-size", &ModelConfig::vocab_size, "vocabulary size (train, export: 0 is the tokenizer's)"},
    {"--make-vocab-size-divisible-by", &ModelConfig::make_vocab_size_divisible_by,
     "pad the vocabulary to a multiple of this × TP", kRunSetting},
    {"--norm-epsilon", &ModelConfig::norm_epsilon, "LayerNorm / RMSNorm epsilon"},
    {"--rotary-base", &ModelConfig::rotary_base, "RoPE base (llama)"},
    {"--add-qkv-bias", &ModelConfig::add_qkv_bias, "biases on q, k and v (llama; Qwen2)"},
    {"--qk-layernorm", &ModelConfig::qk_layernorm,
     "RMSNorm over each head's q and k before RoPE (llama; Qwen3)"},
    {"--kv-channels", &ModelConfig::kv_channels, "attention head dimension (0: hidden / heads)"},
    {"--rotary-percent", &ModelConfig::rotary_percent, "RoPE on this fraction of each head's dimensions"},
    {"--attention-output-gate", &ModelConfig::attention_output_gate,
     "attention output times sigmoid of a gate from q_proj (llama; Qwen3-Next)"},
    {"--apply-layernorm-1p", &ModelConfig::layernorm_1p,
     "zero-centred norms: (1 + weight), weights initialised 0 (llama)"},
    {"--untie-embeddings-and-output-weights", &ModelConfig::untie_embeddings,
     "an LM head of its own (gpt2; llama's is always its own)"},
    {"--openai-gelu", &ModelConfig::openai_gelu,
     "GELU by its tanh approximation (GPT-2's gelu_new) instead of the exact erf form (gpt2)"},
    {"--init-method-std", &ModelConfig::init_method_std,
     "initial weights' normal std (output projections: std / sqrt(2 · layers))", kRunSetting},
    {"--hidden-dropout", &ModelConfig::hidden_dropout,
     "dropout on the embedding's, each attention's (or GDN's) and each MLP's output in training", kRunSetting},
    {"--attention-dropout", &ModelConfig::attention_dropout, "dropout on the attention probabilities in training",
     kRunSetting},
    {"--experimental-attention-variant", AttentionVariant{},
     "none | gdn: Gated DeltaNet layers (llama; Qwen3-Next)"},
    {"--linear-attention-freq", &LinearAttentionConfig::layer_pattern,
     "GDN: full attention every N layers, the others GDN, or a 1 (GDN) / 0 list such as ([1]*3+[0])*2"},
    {"--linear-conv-kernel-dim", &LinearAttentionConfig::conv_kernel_dim, "GDN: causal convolution width"},
    {"--linear-key-head-dim", &LinearAttentionConfig::key_head_dim, "GDN: query/key head dimension"},
    {"--linear-value-head-dim", &LinearAttentionConfig::value_head_dim, "GDN: value head dimension"},
    {"--linear-num-key-heads", &LinearAttentionConfig::num_key_heads, "GDN: query/key heads"},
    {"--linear-num-value-heads", &LinearAttentionConfig::num_value_heads,
     "GDN: value heads (a multiple of the key heads)"},
    {"--mtp-num-layers", &ModelConfig::mtp_num_layers, "multi-token prediction layers (llama)"},
    {"--mtp-loss-scaling-factor", &ModelConfig::mtp_loss_scaling_factor,
     "the MTP loss's weight, divided by --mtp-num-layers", kRunSetting},
    {"--num-experts", &MoeConfig::num_experts, "Mixture of Experts: experts per MoE layer (0: dense)"},
    {"--moe-router-topk", &MoeConfig::topk, "experts per token"},
    {"--moe-ffn-hidden-size", &MoeConfig::ffn_hidden_size, "an expert's MLP size (0: --ffn-hidden-size)"},
    {"--moe-layer-freq", &MoeConfig::layer_pattern, "MoE every N layers, or a 0/1 list such as [1,0,1,0]"},
    {"--moe-shared-expert-intermediate-size", &MoeConfig::shared_expert_size,
     "shared expert MLP size (0: none)"},
    {"--moe-shared-expert-gate", &MoeConfig::shared_expert_gate,
     "the shared expert's output times sigmoid(x · w), w [1, hidden]"},
    {"--moe-router-score-function", NamedSwitch{&MoeConfig::score_sigmoid, "softmax", "sigmoid"},
     "softmax | sigmoid"},
    {"--moe-router-pre-softmax", &MoeConfig::pre_softmax, "softmax over all experts before the top-k"},
    {"--moe-aux-loss-coeff", &MoeConfig::aux_loss_coeff, "load-balancing loss coefficient", kRunSetting},
    {"--moe-z-loss-coeff", &MoeConfig::z_loss_coeff, "router z-loss coefficient", kRunSetting},
    {"--moe-expert-capacity-factor", &MoeConfig::capacity_factor, "expert capacity factor (0: dropless)",
     kRunSetting},
    {"--moe-pad-expert-input-to-capacity", &MoeConfig::pad_to_capacity,
     "pad every expert's input to its capacity", kRunSetting},
    {"--moe-router-force-load-balancing", &MoeConfig::force_load_balancing,
     "benchmarks: route by standard normal random logits (keyed by seed, layer, sample, position, expert), "
     "the gradient straight through to the router's",
     kRunSetting},
};

const ModelField* find_model_field(const std::string& key) {
  for (const ModelField& f : kModelFields)
    if (f.key() == key) return &f;
  return nullptr;
}

}  // namespace

std::string ModelField::key() const {
  std::string k(flag + 2);
  std::replace(k.begin(), k.end(), '-', '_');
  return k;
}

bool ModelField::moe() const {
  return std::visit(
      [](const auto& m) {
        using Member = std::decay_t<decltype(m)>;
        return std::is_same_v<Member, NamedSwitch> || std::is_invocable_v<Member, MoeConfig&>;
      },
      member);
}

bool ModelField::linear() const {
  return std::visit(
      [](const auto& m) {
        using Member = std::decay_t<decltype(m)>;
        return std::is_same_v<Member, AttentionVariant> || std::is_invocable_v<Member, LinearAttentionConfig&>;
      },
      member);
}

std::span<const ModelField> model_fields() { return kModelFields; }

namespace {

// A linear-attention pattern as the interval that makes it, when one does (at least one attention
// layer: the smallest interval of an all-GDN pattern is ambiguous), else as the list.
nlohmann::json linear_pattern_json(const std::vector<int>& pattern) {
  const int layers = static_cast<int>(pattern.size());
  for (int interval = 1; interval <= layers; ++interval)
    if (parse_linear_attention_freq(std::to_string(interval), layers) == pattern) return interval;
  return pattern;
}

}  // namespace

nlohmann::json model_field_json(const ModelField& field, const ModelConfig& cfg) {
  return visit_model_field(
      field, cfg,
      Overloaded{[&](const NamedSwitch& s) -> nlohmann::json { return cfg.moe.*s.member ? s.on : s.off; },
                 [&](const AttentionVariant&) -> nlohmann::json { return cfg.linear.enabled() ? "gdn" : "none"; },
                 [](const Arch& arch) -> nlohmann::json { return arch_name(arch); },
                 [&](const std::vector<int>& pattern) -> nlohmann::json {
                   if (field.linear()) return pattern.empty() ? nlohmann::json("") : linear_pattern_json(pattern);
                   const bool every_layer =
                       std::all_of(pattern.begin(), pattern.end(), [](int p) { return p == 1; });
                   return every_layer ? nlohmann::json(1) : nlohmann::json(pattern);
                 },
                 [](const auto& number) -> nlohmann::json { return number; }});
}

std::string model_field_text(const ModelField& field, const ModelConfig& cfg) {
  const nlohmann::json j = model_field_json(field, cfg);
  if (j.is_string()) return j.get<std::string>();
  if (j.is_number_float())  // as the flag is written: 1e-05, not the double nearest the float
    return visit_model_field(field, cfg, [](const auto& value) {
      if constexpr (std::is_floating_point_v<std::decay_t<decltype(value)>>)
        return fmt::format("{}", value);
      else
        return std::string();
    });
  return j.dump();
}

void set_model_field(const ModelField& field, ModelConfig& cfg, const nlohmann::json& value,
                     const std::string& source) {
  const std::string key = field.key();
  try {
    visit_model_field(field, cfg,
                      Overloaded{[&](int& v) { v = json_integer<int>(value, source, key); },
                                 [&](float& v) { v = json_number<float>(value, source, key); },
                                 [&](double& v) { v = json_number<double>(value, source, key); },
                                 [&](bool& v) { v = value.get<bool>(); },
                                 [&](Arch& arch) { arch = parse_arch(value.get<std::string>()); },
                                 [&](std::vector<int>& pattern) {
                                   const std::string text =
                                       value.is_string() ? value.get<std::string>() : value.dump();
                                   if (!field.linear()) {
                                     pattern = parse_moe_layer_freq(text, cfg.num_layers);
                                     return;
                                   }
                                   TESSEL_CHECK(cfg.linear.enabled(),
                                                "{}: --linear-attention-freq {} needs "
                                                "--experimental-attention-variant gdn",
                                                source, text);
                                   pattern = parse_linear_attention_freq(text, cfg.num_layers);
                                 },
                                 [&](const AttentionVariant&) {
                                   // gated_delta_net: Megatron's older name for gdn.
                                   const std::string word = value.get<std::string>();
                                   TESSEL_CHECK(word == "none" || word == "gdn" || word == "gated_delta_net",
                                                "{}: --experimental-attention-variant must be none or gdn "
                                                "(got {})", source, word);
                                   if (word == "none") cfg.linear.layer_pattern.clear();
                                   else if (!cfg.linear.enabled()) cfg.linear.layer_pattern.assign(cfg.num_layers, 1);
                                 },
                                 [&](const NamedSwitch& s) {
                                   const std::string word = value.get<std::string>();
                                   TESSEL_CHECK(word == s.off || word == s.on, "{} must be {} or {} (got {})",
                                                field.flag, s.off, s.on, word);
                                   cfg.moe.*s.member = word == s.on;
                                 }});
  } catch (const nlohmann::json::exception& e) {
    fail("{}: {}: {}", source, key, e.what());
  }
}

void model_config_from_json(const nlohmann::json& j, ModelConfig& cfg, const std::string& source) {
  TESSEL_CHECK(j.is_object(), "{}: expected a JSON object", source);
  std::vector<std::string> unknown;
  for (const auto& [key, value] : j.items())
    if (find_model_field(key) == nullptr) unknown.push_back(fmt::format("unknown model key '{}'", key));
  if (!unknown.empty()) fail("{}: {}", source, fmt::join(unknown, "; "));
  for (const ModelField& field : kModelFields)
    if (auto it = j.find(field.key()); it != j.end()) set_model_field(field, cfg, *it, source);
}

nlohmann::json model_config_to_json(const ModelConfig& cfg) {
  const ModelConfig sizes = cfg.explicit_sizes();
  nlohmann::json j = nlohmann::json::object();
  for (const ModelField& field : kModelFields)
    if ((!field.moe() || cfg.moe.num_experts > 0) && (!field.linear() || cfg.linear.enabled()))
      j[field.key()] = model_field_json(field, sizes);
  return j;
}

nlohmann::json read_model_file(const std::string& path) {
  std::ifstream in(path);
  TESSEL_CHECK(in.good() && !std::filesystem::is_directory(path), "{}: cannot open model file{}", path,
               std::filesystem::is_directory(path) ? " (a folder)" : "");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON ({})", path, e.what());
  }
}

std::vector<std::string> MoeConfig::violations(int ep_size, int num_layers) const {
  std::vector<std::string> v;
  if (num_experts < 1) v.push_back(fmt::format("--num-experts {} must be at least 1", num_experts));
  if (topk < 1 || topk > num_experts) {
    v.push_back(fmt::format("--moe-router-topk {} must be between 1 and --num-experts {}", topk,
                            num_experts));
  }
  if (ep_size < 1 || (num_experts > 0 && num_experts % ep_size != 0)) {
    v.push_back(fmt::format("--num-experts {} must be divisible by --expert-model-parallel-size {}",
                            num_experts, ep_size));
  }
  if (topk == 1 && !score_sigmoid && !pre_softmax) {
    v.push_back(
        "--moe-router-topk 1 with softmax scores needs --moe-router-pre-softmax (a softmax "
        "over one logit has no gradient)");
  }
  if (ffn_hidden_size < 0)
    v.push_back(fmt::format("--moe-ffn-hidden-size {} is negative", ffn_hidden_size));
  if (shared_expert_size < 0) {
    v.push_back(
        fmt::format("--moe-shared-expert-intermediate-size {} is negative", shared_expert_size));
  }
  if (capacity_factor < 0) {
    v.push_back(fmt::format("--moe-expert-capacity-factor {} is negative", capacity_factor));
  }
  if (pad_to_capacity && capacity_factor <= 0) {
    v.push_back("--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor");
  }
  if (aux_loss_coeff < 0 || z_loss_coeff < 0) {
    v.push_back(
        fmt::format("--moe-aux-loss-coeff {} and --moe-z-loss-coeff {} must not be negative",
                    aux_loss_coeff, z_loss_coeff));
  }
  if (!layer_pattern.empty() && static_cast<int>(layer_pattern.size()) != num_layers) {
    v.push_back(fmt::format("--moe-layer-freq has {} entries for {} layers", layer_pattern.size(),
                            num_layers));
  }
  return v;
}

}  // namespace tessel
