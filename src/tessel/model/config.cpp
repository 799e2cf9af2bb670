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

namespace {

// Megatron's moe_layer_freq string: a Python list expression of 0/1 built from list literals,
// '+' (concatenation), '* integer' (repetition) and parentheses, e.g. "([1]*3+[0]*1)*2".
class PatternParser {
 public:
  explicit PatternParser(const std::string& text) : text_(text) {}

  std::vector<int> parse() {
    std::vector<int> v = expr();
    skip_space();
    if (pos_ != text_.size()) error("unexpected '{}'", text_[pos_]);
    return v;
  }

 private:
  std::vector<int> expr() {
    std::vector<int> v = term();
    while (accept('+')) {
      std::vector<int> more = term();
      v.insert(v.end(), more.begin(), more.end());
    }
    return v;
  }
  std::vector<int> term() {
    std::vector<int> v = atom();
    while (accept('*')) {
      const int64_t times = integer();
      std::vector<int> repeated;
      for (int64_t i = 0; i < times; ++i) repeated.insert(repeated.end(), v.begin(), v.end());
      v = std::move(repeated);
    }
    return v;
  }
  std::vector<int> atom() {
    if (accept('(')) {
      std::vector<int> v = expr();
      expect(')');
      return v;
    }
    expect('[');
    std::vector<int> v;
    if (accept(']')) return v;
    do {
      v.push_back(static_cast<int>(integer()));
    } while (accept(','));
    expect(']');
    return v;
  }
  int64_t integer() {
    skip_space();
    const size_t start = pos_;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    if (start == pos_ || pos_ - start > 6) error("expected a small integer at position {}", start);
    return std::stoll(text_.substr(start, pos_ - start));
  }
  bool accept(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!accept(c)) error("expected '{}' at position {}", c, pos_);
  }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  template <typename... Args>
  [[noreturn]] void error(fmt::format_string<Args...> format, Args&&... args) {
    fail("--moe-layer-freq \"{}\": {}", text_, fmt::format(format, std::forward<Args>(args)...));
  }

  const std::string& text_;
  size_t pos_ = 0;
};

}  // namespace

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
  if (num_attention_heads > 0 && hidden_size % num_attention_heads != 0)
    v.push_back(fmt::format("--hidden-size {} is not divisible by --num-attention-heads {}",
                            hidden_size, num_attention_heads));
  if (num_query_groups < 0) v.push_back("--num-query-groups must not be negative");
  if (num_query_groups > 0 && num_attention_heads % num_query_groups != 0)
    v.push_back(fmt::format("--num-attention-heads {} is not divisible by --num-query-groups {}",
                            num_attention_heads, num_query_groups));
  if (arch == Arch::GPT2 && num_query_groups > 0 && num_query_groups != num_attention_heads)
    v.push_back("--num-query-groups (grouped-query attention) needs --arch llama");
  if (ffn_hidden_size < 0) v.push_back("--ffn-hidden-size must not be negative");
  else if (hidden_size > 0 && ffn_size() <= 0)
    v.push_back("--ffn-hidden-size is needed: the default (2/3 of 4·hidden, a multiple of 64) is 0");
  if (max_position_embeddings > 0 && max_position_embeddings < seq_length)
    v.push_back(fmt::format("--max-position-embeddings {} is smaller than --seq-length {}",
                            max_position_embeddings, seq_length));
  if (arch == Arch::Llama && num_attention_heads > 0 && hidden_size % num_attention_heads == 0 &&
      head_dim() % 2 != 0)
    v.push_back(fmt::format("RoPE needs an even head dimension (hidden/heads = {})", head_dim()));
  if (arch == Arch::GPT2 && add_qkv_bias)
    v.push_back("--add-qkv-bias needs --arch llama (gpt2's fused c_attn always has a bias)");
  if (arch == Arch::GPT2 && qk_layernorm) v.push_back("--qk-layernorm needs --arch llama");
  if (!(norm_epsilon > 0)) v.push_back("--norm-epsilon must be positive");
  if (!(rotary_base > 0)) v.push_back("--rotary-base must be positive");
  if (make_vocab_size_divisible_by <= 0) v.push_back("--make-vocab-size-divisible-by must be positive");
  return v;
}

ModelConfig ModelConfig::explicit_sizes() const {
  ModelConfig c = *this;
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
  const int64_t attention = 2 * C + C * C + 2 * C * kv + C * C  // norms, q, k, v, o
                            + (add_qkv_bias ? C + 2 * kv : 0) + (qk_layernorm ? 2 * head_dim() : 0);
  int64_t total = 2 * V * C + C;
  for (int l = 0; l < num_layers; ++l) {
    if (!moe.is_moe_layer(l)) {
      total += attention + 3 * C * F;
      continue;
    }
    const int64_t E = moe.num_experts, Fe = moe.ffn_hidden_size > 0 ? moe.ffn_hidden_size : F;
    const int64_t S = moe.shared_expert_size;
    total += attention + E * C + E * 3 * C * Fe + (S > 0 ? 3 * C * S + C : 0);
  }
  return total;
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
    {"--num-experts", &MoeConfig::num_experts, "Mixture of Experts: experts per MoE layer (0: dense)"},
    {"--moe-router-topk", &MoeConfig::topk, "experts per token"},
    {"--moe-ffn-hidden-size", &MoeConfig::ffn_hidden_size, "an expert's MLP size (0: --ffn-hidden-size)"},
    {"--moe-layer-freq", &MoeConfig::layer_pattern, "MoE every N layers, or a 0/1 list such as [1,0,1,0]"},
    {"--moe-shared-expert-intermediate-size", &MoeConfig::shared_expert_size,
     "shared expert MLP size (0: none)"},
    {"--moe-router-score-function", NamedSwitch{&MoeConfig::score_sigmoid, "softmax", "sigmoid"},
     "softmax | sigmoid"},
    {"--moe-router-pre-softmax", &MoeConfig::pre_softmax, "softmax over all experts before the top-k"},
    {"--moe-aux-loss-coeff", &MoeConfig::aux_loss_coeff, "load-balancing loss coefficient", kRunSetting},
    {"--moe-z-loss-coeff", &MoeConfig::z_loss_coeff, "router z-loss coefficient", kRunSetting},
    {"--moe-expert-capacity-factor", &MoeConfig::capacity_factor, "expert capacity factor (0: dropless)",
     kRunSetting},
    {"--moe-pad-expert-input-to-capacity", &MoeConfig::pad_to_capacity,
     "pad every expert's input to its capacity", kRunSetting},
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
      [](const auto& m) { return !std::is_invocable_v<std::decay_t<decltype(m)>, ModelConfig&>; }, member);
}

std::span<const ModelField> model_fields() { return kModelFields; }

nlohmann::json model_field_json(const ModelField& field, const ModelConfig& cfg) {
  return visit_model_field(
      field, cfg,
      Overloaded{[&](const NamedSwitch& s) -> nlohmann::json { return cfg.moe.*s.member ? s.on : s.off; },
                 [](const Arch& arch) -> nlohmann::json { return arch_name(arch); },
                 [](const std::vector<int>& pattern) -> nlohmann::json {
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
                                   pattern = parse_moe_layer_freq(
                                       value.is_string() ? value.get<std::string>() : value.dump(),
                                       cfg.num_layers);
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
    if (!field.moe() || cfg.moe.num_experts > 0) j[field.key()] = model_field_json(field, sizes);
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

std::vector<int> parse_moe_layer_freq(const std::string& text, int num_layers) {
  const bool interval = !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c));
  });
  std::vector<int> pattern;
  if (interval) {
    TESSEL_CHECK(text.size() <= 6 && std::stoi(text) >= 1,
                 "--moe-layer-freq {}: the interval must be at least 1", text);
    const int every = std::stoi(text);
    for (int i = 0; i < num_layers; ++i) pattern.push_back(i % every == 0 ? 1 : 0);
    return pattern;
  }
  pattern = PatternParser(text).parse();
  TESSEL_CHECK(static_cast<int>(pattern.size()) == num_layers,
               "--moe-layer-freq \"{}\" has {} entries for {} layers", text, pattern.size(),
               num_layers);
  for (int p : pattern) {
    TESSEL_CHECK(p == 0 || p == 1, "--moe-layer-freq \"{}\": entries must be 0 or 1, not {}", text,
                 p);
  }
  return pattern;
}

}  // namespace tessel
