// Megatron-LM's way of naming a layer architecture: one flag per trait (--normalization,
// --position-embedding-type, --swiglu, --disable-bias-linear, ...) where tessel names the whole
// by --arch. The flags given are read over the architecture the model already has (--arch, a
// model file, --init-from's config.json; else gpt2, which is Megatron's default GPT) and must come
// to one that tessel builds: gpt2 (LayerNorm, learned absolute positions, GELU, biases) or llama
// (RMSNorm, RoPE, SwiGLU, no biases). Anything else is refused naming every trait that differs,
// never built as the nearest architecture.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "tessel/model/config.h"

namespace tessel {

class ArchitectureFlags {
 public:
  // Adds the flags to `app` (once); they parse into this object, which must outlive app.parse().
  void add_to(CLI::App& app);
  bool any_given() const;
  // --linear-attention-type gated_delta_net: the model zoo's name for Gated DeltaNet layers
  // (--experimental-attention-variant gdn).
  bool gated_delta_net() const { return linear_attention_type_->count() > 0; }

  // Sets cfg.arch from the traits the flags give over cfg's own, and --group-query-attention's
  // query groups; appends to `v` every rule broken. `query_groups_given`: --num-query-groups was
  // on the command line (Megatron reads it only with --group-query-attention).
  void apply(ModelConfig& cfg, bool query_groups_given, std::vector<std::string>& v) const;

 private:
  std::string normalization_, position_embedding_type_, rope_type_, linear_attention_type_value_;
  int rotary_interpolation_factor_ = 1;
  CLI::Option *normalization_opt_ = nullptr, *position_opt_ = nullptr, *no_position_ = nullptr,
              *swiglu_ = nullptr, *squared_relu_ = nullptr, *quick_geglu_ = nullptr,
              *disable_bias_ = nullptr, *group_query_ = nullptr, *rope_type_opt_ = nullptr,
              *interpolation_ = nullptr, *linear_attention_type_ = nullptr;
};

}  // namespace tessel
