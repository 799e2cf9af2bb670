// LayerNorm (GPT-2: weight and bias) or RMSNorm (Llama: weight only) over rows of `width`
// values: the block and final norms on this rank's rows of the residual stream, and Qwen3's
// QK-norm on each head's D values. Zero-centred (--apply-layernorm-1p, Qwen3-Next's norms), an
// RMSNorm scales by (1 + weight), its weight initialised 0 and stored so (as Hugging Face does).
#pragma once

#include <cstdint>
#include <string>

#include "tessel/model/config.h"
#include "tessel/model/layer.h"

namespace tessel {

enum class NormKind : uint8_t { LayerNorm, RMSNorm };

class Norm {
 public:
  struct Saved {
    Tensor mean, rstd;  // (rows) each; mean for LayerNorm only
  };

  // What a norm is: its kind, the names of its weight and (LayerNorm) bias, the width of its rows,
  // its epsilon, and whether its weight is zero-centred.
  struct Spec {
    NormKind kind = NormKind::RMSNorm;
    std::string weight_name, bias_name;
    int64_t width = 0;
    float eps = 0;
    bool zero_centred = false;
  };

  // Declares the weight (ones, or zeros when zero-centred; no weight decay) and, for LayerNorm,
  // the bias (zeros), replicated on every rank.
  Norm(const Kernels& k, ParamRegistry& registry, const Spec& spec);

  // `role` names the norm's tensors ("norm 1", "q-norm", ...).
  void list_saved(Saved& s, TensorList& buffers, int64_t rows, const std::string& role) const;
  // out (rows, width) = norm(x (rows, width)).
  void forward(Saved& s, float* out, const float* x, int64_t rows) const;
  // dx (rows, width) += d(x) from dout; the weight (and bias) gradients accumulate too.
  void backward(const Saved& s, float* dx, const float* dout, const float* x, int64_t rows) const;

  int weight() const { return weight_; }
  int bias() const { return bias_; }  // -1 for RMSNorm

 private:
  const Kernels& k_;
  ParamView params_;
  NormKind kind_;
  int weight_ = -1, bias_ = -1;
  int64_t width_;
  float eps_;
  float gain_offset_;  // 1 when zero-centred
};

// A norm of the model's: its epsilon (--norm-epsilon) and zero-centring (--apply-layernorm-1p).
Norm::Spec model_norm(const ModelConfig& cfg, NormKind kind, std::string weight_name, int64_t width,
                      std::string bias_name = {});

}  // namespace tessel
