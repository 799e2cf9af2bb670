#include "tessel/model/norm.h"

#include "tessel/core/error.h"

namespace tessel {

Norm::Norm(const Kernels& k, ParamRegistry& registry, NormKind kind, const std::string& weight_name,
           const std::string& bias_name, int64_t width, float eps, bool zero_centred)
    : k_(k), params_(registry), kind_(kind), width_(width), eps_(eps), gain_offset_(zero_centred ? 1.0f : 0.0f) {
  TESSEL_CHECK(!zero_centred || kind == NormKind::RMSNorm, "{}: a zero-centred norm is an RMSNorm", weight_name);
  weight_ = registry.add(weight_name, {width}, zero_centred ? ParamInit::Zeros : ParamInit::Ones, 0, false);
  if (kind == NormKind::LayerNorm) bias_ = registry.add(bias_name, {width}, ParamInit::Zeros, 0, false);
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

}  // namespace tessel
