#include "architecture_flags.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tessel {

namespace {

// The four traits Megatron's flags name separately, as Megatron spells their values.
struct Traits {
  std::string normalization;  // LayerNorm | RMSNorm
  std::string positions;      // learned_absolute | rope | yarn | mrope | relative | none
  std::string mlp;            // gelu | swiglu | squared_relu | quick_geglu
  bool bias = true;           // Megatron's add_bias_linear

  bool operator==(const Traits&) const = default;
};

Traits traits_of(Arch arch) {
  return arch == Arch::GPT2 ? Traits{"LayerNorm", "learned_absolute", "gelu", true}
                            : Traits{"RMSNorm", "rope", "swiglu", false};
}

std::string describe(const Traits& t) {
  return fmt::format("{}, {} positions, {} MLP, {}", t.normalization, t.positions, t.mlp,
                     t.bias ? "biases" : "no biases (--disable-bias-linear)");
}

}  // namespace

void ArchitectureFlags::add_to(CLI::App& app) {
  const char* group = "Megatron-LM's architecture flags (they come to --arch gpt2 or llama)";
  normalization_opt_ = app.add_option("--normalization", normalization_, "LayerNorm (gpt2) | RMSNorm (llama)")
                           ->check(CLI::IsMember({"LayerNorm", "RMSNorm"}))
                           ->group(group);
  position_opt_ = app.add_option("--position-embedding-type", position_embedding_type_,
                                 "learned_absolute (gpt2) | rope (llama); yarn, mrope, relative and none are "
                                 "not built")
                      ->check(CLI::IsMember({"learned_absolute", "rope", "yarn", "mrope", "relative", "none"}))
                      ->group(group);
  no_position_ = app.add_flag("--no-position-embedding")->description("deprecated in Megatron-LM: accepted with rope (where it changes nothing)")
                     ->group(group);
  swiglu_ = app.add_flag("--swiglu")->description("a SwiGLU MLP (llama) instead of GELU")->group(group);
  squared_relu_ = app.add_flag("--squared-relu")->description("not built: tessel's MLPs are GELU and SwiGLU")->group(group);
  quick_geglu_ = app.add_flag("--quick-geglu")->description("not built: tessel's MLPs are GELU and SwiGLU")->group(group);
  disable_bias_ = app.add_flag("--disable-bias-linear")->description("no biases in the linear layers (llama)")->group(group);
  group_query_ = app.add_flag("--group-query-attention")->description("grouped-query attention: --num-query-groups key/value heads (default 1)")
                     ->group(group);
  rope_type_opt_ = app.add_option("--rope-type", rope_type_, "rope (YaRN is not built)")
                       ->check(CLI::IsMember({"rope", "yarn"}))
                       ->group(group);
  interpolation_ = app.add_option("--rotary-seq-len-interpolation-factor", rotary_interpolation_factor_,
                                  "RoPE positions divided by this (only 1, no interpolation, is built)")
                       ->group(group);
  linear_attention_type_ = app.add_option("--linear-attention-type", linear_attention_type_value_,
                                          "gated_delta_net: Gated DeltaNet layers (the model zoo's name for "
                                          "--experimental-attention-variant gdn)")
                               ->check(CLI::IsMember({"gated_delta_net"}))
                               ->group(group);
}

bool ArchitectureFlags::any_given() const {
  for (const CLI::Option* o : {normalization_opt_, position_opt_, no_position_, swiglu_, squared_relu_,
                               quick_geglu_, disable_bias_, group_query_, rope_type_opt_, interpolation_,
                               linear_attention_type_})
    if (o->count() > 0) return true;
  return false;
}

void ArchitectureFlags::apply(ModelConfig& cfg, bool query_groups_given, std::vector<std::string>& v) const {
  Traits t = traits_of(cfg.arch);
  if (normalization_opt_->count() > 0) t.normalization = normalization_;
  if (position_opt_->count() > 0) t.positions = position_embedding_type_;
  if (swiglu_->count() > 0) t.mlp = "swiglu";
  if (squared_relu_->count() > 0) t.mlp = "squared_relu";
  if (quick_geglu_->count() > 0) t.mlp = "quick_geglu";
  if (disable_bias_->count() > 0) t.bias = false;
  if (swiglu_->count() + squared_relu_->count() + quick_geglu_->count() > 1)
    v.push_back("--swiglu, --squared-relu and --quick-geglu exclude each other (Megatron-LM asserts it)");
  // Megatron-LM refuses --no-position-embedding unless the positions are RoPE's, which it then
  // leaves as they are.
  if (no_position_->count() > 0 && t.positions != "rope")
    v.push_back("--no-position-embedding is deprecated, use --position-embedding-type (Megatron-LM refuses it "
                "without rope too)");
  if (rope_type_opt_->count() > 0 && rope_type_ != "rope")
    v.push_back(fmt::format("--rope-type {}: tessel's attention has RoPE only (Megatron-LM also takes yarn only with "
                            "multi-latent attention)",
                            rope_type_));
  if (interpolation_->count() > 0 && rotary_interpolation_factor_ != 1)
    v.push_back(fmt::format("--rotary-seq-len-interpolation-factor {}: RoPE with interpolated positions is not "
                            "built (1, none, is)",
                            rotary_interpolation_factor_));
  if (t == traits_of(Arch::GPT2)) {
    cfg.arch = Arch::GPT2;
  } else if (t == traits_of(Arch::Llama)) {
    cfg.arch = Arch::Llama;
  } else {
    v.push_back(fmt::format("the architecture flags ask for {}; tessel builds gpt2 ({}) and llama ({})", describe(t),
                            describe(traits_of(Arch::GPT2)), describe(traits_of(Arch::Llama))));
  }
  // Megatron-LM reads --num-query-groups only with --group-query-attention (its default then 1).
  if (query_groups_given && group_query_->count() == 0 && cfg.num_query_groups != cfg.num_attention_heads)
    v.push_back(fmt::format("--num-query-groups {} needs --group-query-attention (without it Megatron-LM ignores "
                            "the groups and gives every query head its own key/value head)",
                            cfg.num_query_groups));
  if (group_query_->count() > 0 && !query_groups_given && cfg.num_query_groups == 0) cfg.num_query_groups = 1;
}

}  // namespace tessel
