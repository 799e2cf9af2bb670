#include "tessel/model/mlp.h"

namespace tessel {

Mlp::Mlp(const Kernels& k, ParamRegistry& registry, const Spec& spec)
    : k_(k),
      params_(registry),
      activation_(spec.activation),
      layout_(spec.activation != Activation::SwiGlu ? WeightLayout::InOut : WeightLayout::OutIn),
      C_(spec.C),
      F_l_(spec.F_l) {
  const std::string& prefix = spec.prefix;
  const int64_t C = spec.C, F = spec.F;
  const Split& split = spec.split;
  auto weight = [&](const std::string& name, Shape shape, float std, ShardSpec shard) {
    return registry.add(prefix + name, std::move(shape), ParamInit::Normal, std, true, shard);
  };
  auto bias = [&](const std::string& name, int64_t n, ShardSpec shard) {
    return registry.add(prefix + name, {n}, ParamInit::Zeros, 0, false, shard);
  };
  if (spec.activation != Activation::SwiGlu) {
    fc_w_ = weight("c_fc.weight", {C, F}, spec.in_std, split(1));
    fc_b_ = bias("c_fc.bias", F, split(0));
    down_w_ = weight("c_proj.weight", {F, C}, spec.out_std, split(0));
    down_b_ = bias("c_proj.bias", C, ShardSpec{});
  } else {
    fc_w_ = weight("gate_proj.weight", {F, C}, spec.in_std, split(0));
    up_w_ = weight("up_proj.weight", {F, C}, spec.in_std, split(0));
    down_w_ = weight("down_proj.weight", {C, F}, spec.out_std, split(1));
  }
}

std::vector<int> Mlp::param_indices() const {
  std::vector<int> ids;
  for (int p : {fc_w_, fc_b_, up_w_, down_w_, down_b_})
    if (p >= 0) ids.push_back(p);
  return ids;
}

void Mlp::list_saved(Saved& s, TensorList& activations, TensorList& gradients, int64_t M,
                     const std::string& role) const {
  const bool swiglu = activation_ == Activation::SwiGlu;
  activations.add(s.hidden, {M, F_l_}, role + (swiglu ? " gate" : " hidden"));
  activations.add(s.act, {M, F_l_}, role + " activation");
  gradients.add(s.d_hidden, {M, F_l_}, role + (swiglu ? " gate gradient" : " hidden gradient"));
  if (swiglu) {
    activations.add(s.up, {M, F_l_}, role + " up");
    gradients.add(s.d_up, {M, F_l_}, role + " up gradient");
  }
  gradients.add(s.d_out, {M, C_}, role + " output gradient");
}

void Mlp::hidden_forward(const MlpRows& r, const float* in, int64_t M) const {
  k_.linear_forward(r.hidden, in, params_.value(fc_w_), params_.value(fc_b_), M, C_, F_l_, layout_);
  if (activation_ == Activation::Gelu) {
    k_.gelu_erf_forward(r.act, r.hidden, M * F_l_);
  } else if (activation_ == Activation::GeluTanh) {
    k_.gelu_forward(r.act, r.hidden, M * F_l_);
  } else {
    k_.linear_forward(r.up, in, params_.value(up_w_), nullptr, M, C_, F_l_, layout_);
    k_.swiglu_forward(r.act, r.hidden, r.up, M * F_l_);
  }
}

void Mlp::forward_rows(const MlpRows& r, float* out, const float* in, int64_t M) const {
  hidden_forward(r, in, M);
  k_.linear_forward(out, r.act, params_.value(down_w_), nullptr, M, F_l_, C_, layout_);
}

void Mlp::backward_input_rows(const MlpRows& r, float* d_in, const float* in, int64_t M,
                              float* d_act) const {
  const int64_t n = M * F_l_;
  k_.zero(d_act, n);
  k_.linear_backward(d_act, nullptr, nullptr, r.d_out, r.act, params_.value(down_w_), M, F_l_, C_,
                     layout_);
  k_.zero(r.d_hidden, n);
  if (activation_ == Activation::Gelu) {
    k_.gelu_erf_backward(r.d_hidden, d_act, r.hidden, n);
  } else if (activation_ == Activation::GeluTanh) {
    k_.gelu_backward(r.d_hidden, d_act, r.hidden, n);
  } else {
    k_.zero(r.d_up, n);
    k_.swiglu_backward(r.d_hidden, r.d_up, d_act, r.hidden, r.up, n);
  }
  k_.linear_backward(d_in, nullptr, nullptr, r.d_hidden, in, params_.value(fc_w_), M, C_, F_l_,
                     layout_);
  if (activation_ == Activation::SwiGlu)
    k_.linear_backward(d_in, nullptr, nullptr, r.d_up, in, params_.value(up_w_), M, C_, F_l_,
                       layout_);
}

void Mlp::backward_weight_rows(const MlpRows& r, const float* in, int64_t M) const {
  k_.linear_backward(nullptr, params_.grad(down_w_), nullptr, r.d_out, r.act,
                     params_.value(down_w_), M, F_l_, C_, layout_);
  k_.linear_backward(nullptr, params_.grad(fc_w_), params_.grad(fc_b_), r.d_hidden, in,
                     params_.value(fc_w_), M, C_, F_l_, layout_);
  if (activation_ == Activation::SwiGlu)
    k_.linear_backward(nullptr, params_.grad(up_w_), nullptr, r.d_up, in, params_.value(up_w_), M,
                       C_, F_l_, layout_);
}

void Mlp::forward(Saved& s, float* out_local, const float* in, int64_t M, const TensorParallel& tp,
                  float* partial) const {
  float* product = tp.size() > 1 ? partial : out_local;
  forward_rows(s.rows(), product, in, M);
  tp.reduce_rows(product, out_local, M, C_);
  if (down_b_ >= 0) k_.bias_forward(out_local, params_.value(down_b_), tp.local_rows(M), C_);
}

void Mlp::backward_input(Saved& s, float* d_in, const float* d_out_local, const float* in,
                         int64_t M, const TensorParallel& tp, float* d_act) const {
  tp.gather_rows(d_out_local, s.d_out.data(), M, C_);  // a copy without sequence parallel
  backward_input_rows(s.rows(), d_in, in, M, d_act);
}

// The down bias was added after the TP reduction to this rank's rows only: its gradient sums
// those rows of the gathered output gradient.
void Mlp::backward_weight(Saved& s, const float* in, int64_t M, const TensorParallel& tp) const {
  if (down_b_ >= 0)
    k_.bias_backward(params_.grad(down_b_), s.d_out.data() + tp.first_row(M) * C_,
                     tp.local_rows(M), C_);
  backward_weight_rows(s.rows(), in, M);
}

}  // namespace tessel
