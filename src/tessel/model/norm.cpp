#include "tessel/model/norm.h"

#include "tessel/core/error.h"

namespace tessel {

Norm::Norm(const Kernels& k, ParamRegistry& registry, const Spec& spec)
    : k_(k),
      params_(registry),
      kind_(spec.kind),
      width_(spec.width),
      eps_(spec.eps),
      gain_offset_(spec.zero_centred ? 1.0f : 0.0f) {
  TESSEL_CHECK(!spec.zero_centred || spec.kind == NormKind::RMSNorm, "{}: a zero-centred norm is an RMSNorm",
               spec.weight_name);
  weight_ = registry.add(spec.weight_name, {spec.width}, spec.zero_centred ? ParamInit::Zeros : ParamInit::Ones, 0,
                         false);
  registry.params()[weight_].zero_centred = spec.zero_centred;
  if (spec.kind == NormKind::LayerNorm)
    bias_ = registry.add(spec.bias_name, {spec.width}, ParamInit::Zeros, 0, false);
}

void Norm::list_saved(Saved& s, TensorList& buffers, int64_t rows, const std::string& role) const {
  if (kind_ == NormKind::LayerNorm) buffers.add(s.mean, {rows}, role + " mean");
  buffers.add(s.rstd, {rows}, role + " rstd");
}

void Norm::forward(Saved& s, float* out, const float* x, int64_t rows) const {
  if (kind_ == NormKind::LayerNorm) {
    k_.layernorm_forward(out, s.mean.data(), s.rstd.data(), x, params_.value(weight_),
                         params_.value(bias_), rows, width_, eps_);
  } else {
    k_.rmsnorm_forward(out, s.rstd.data(), x, params_.value(weight_), rows, width_, eps_, gain_offset_);
  }
}

void Norm::backward(const Saved& s, float* dx, const float* dout, const float* x,
                    int64_t rows) const {
  if (kind_ == NormKind::LayerNorm) {
    k_.layernorm_backward(dx, params_.grad(weight_), params_.grad(bias_), dout, x,
                          params_.value(weight_), s.mean.data(), s.rstd.data(), rows, width_);
  } else {
    k_.rmsnorm_backward(dx, params_.grad(weight_), dout, x, params_.value(weight_), s.rstd.data(),
                        rows, width_, gain_offset_);
  }
}

Norm::Spec model_norm(const ModelConfig& cfg, NormKind kind, std::string weight_name, int64_t width,
                      std::string bias_name) {
  return {.kind = kind,
          .weight_name = std::move(weight_name),
          .bias_name = std::move(bias_name),
          .width = width,
          .eps = cfg.norm_epsilon,
          .zero_centred = cfg.layernorm_1p};
}

}  // namespace tessel
