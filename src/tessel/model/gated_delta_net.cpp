#include "tessel/model/gated_delta_net.h"

#include <fmt/format.h>

#include "tessel/core/error.h"

namespace tessel {

// Hugging Face's order and names (Qwen3.5's flat projections), split over TP by heads as
// Megatron splits GDN: each rank owns Hk/TP whole key heads and the Hv/TP value heads that read
// them (contiguous ranges: value head j reads key head j / (Hv/Hk)).
GatedDeltaNet::GatedDeltaNet(const Kernels& k, ParamRegistry& registry, const ModelConfig& cfg, int layer,
                             const TensorParallel& tp, int64_t B, int64_t T, const LayerBuffers& buffers)
    : k_(k),
      params_(registry),
      tp_(tp),
      B_(B),
      T_(T),
      N_(B * T),
      C_(cfg.hidden_size),
      Hk_(cfg.linear.num_key_heads / tp.size()),
      Hv_(cfg.linear.num_value_heads / tp.size()),
      dk_(cfg.linear.key_head_dim),
      dv_(cfg.linear.value_head_dim),
      K_(cfg.linear.conv_kernel_dim),
      key_dim_(Hk_ * dk_),
      value_dim_(Hv_ * dv_),
      conv_dim_(2 * key_dim_ + value_dim_),
      eps_(cfg.norm_epsilon) {
  TESSEL_CHECK(cfg.linear.num_key_heads % tp.size() == 0 && cfg.linear.num_value_heads % tp.size() == 0,
               "Gated DeltaNet layer {}: {} key and {} value heads do not split over TP {}", layer,
               cfg.linear.num_key_heads, cfg.linear.num_value_heads, tp.size());
  const std::string p = fmt::format("model.layers.{}.linear_attn.", layer);
  const int64_t key_dim = cfg.linear.key_dim(), value_dim = cfg.linear.value_dim(),
                Hv = cfg.linear.num_value_heads;
  // Rows (dim 0) or, for out_proj, columns (dim 1) split over TP; in_proj_qkv's and conv1d's rows
  // [Q | K | V] section by section.
  auto split = [&](int dim, std::vector<int64_t> sections = {}) {
    return ShardSpec{.dim = dim, .group = ShardGroup::TP, .index = tp.rank(), .count = tp.size(),
                     .sections = std::move(sections)};
  };
  const std::vector<int64_t> qkv_sections = {key_dim, key_dim, value_dim};
  auto weight = [&](const std::string& name, Shape shape, ShardSpec shard) {
    return registry.add(p + name, std::move(shape), ParamInit::Normal, kInitStd, true, std::move(shard));
  };
  qkv_w_ = weight("in_proj_qkv.weight", {cfg.linear.conv_dim(), C_}, split(0, qkv_sections));
  z_w_ = weight("in_proj_z.weight", {value_dim, C_}, split(0));
  b_w_ = weight("in_proj_b.weight", {Hv, C_}, split(0));
  a_w_ = weight("in_proj_a.weight", {Hv, C_}, split(0));
  conv_w_ = weight("conv1d.weight", {cfg.linear.conv_dim(), 1, K_}, split(0, qkv_sections));
  // Megatron decays neither (1-D); HF: dt_bias 1, A = U(0, 16), A_log = log A.
  dt_bias_ = registry.add(p + "dt_bias", {Hv}, ParamInit::Ones, 0, false, split(0));
  A_log_ = registry.add(p + "A_log", {Hv}, ParamInit::LogUniform, 16.0f, false, split(0));
  // A plain gain over dv, shared by every value head: each TP rank's gradient is its heads' part.
  norm_w_ = registry.add(p + "norm.weight", {dv_}, ParamInit::Ones, 0, false);
  registry.params()[norm_w_].grad_partial_over_tp = true;
  out_w_ = weight("out_proj.weight", {C_, value_dim}, split(1));

  TensorList& scratch = buffers.scratch;
  scratch.add(d_qk_, {N_, conv_dim_}, "GDN q, k gradients (the delta rule's layout)");
  scratch.add(d_conv_, {N_, conv_dim_}, "GDN convolution output gradient");
  scratch.add(d_core_, {N_, value_dim_}, "GDN delta-rule output gradient");
  scratch.add(d_normed_, {N_, value_dim_}, "GDN gated-norm output gradient");
  scratch.add(d_beta_, {N_, Hv_}, "GDN beta gradient");
  scratch.add(d_g_, {N_, Hv_}, "GDN decay gradient");
}

void GatedDeltaNet::list_saved(Saved& s, SavedLists& lists, const LayerRecompute& r) const {
  TensorList& acts = lists.pick(r.full);
  TensorList& grads = lists.pick(r.weights_in_input_pass());
  acts.add(s.qkv_raw, {N_, conv_dim_}, "GDN qkv projection");
  acts.add(s.qkv, {N_, conv_dim_}, "GDN q, k, v (convolved, q and k l2-normed)");
  acts.add(s.q_rstd, {N_, Hk_}, "GDN q l2norm rstd");
  acts.add(s.k_rstd, {N_, Hk_}, "GDN k l2norm rstd");
  acts.add(s.z, {N_, value_dim_}, "GDN output gate input z");
  acts.add(s.b, {N_, Hv_}, "GDN beta input b");
  acts.add(s.a, {N_, Hv_}, "GDN decay input a");
  acts.add(s.beta, {N_, Hv_}, "GDN beta");
  acts.add(s.g, {N_, Hv_}, "GDN log decay");
  acts.add(s.Ainv, {B_, Hv_, delta_rule_chunks(T_), kDeltaChunk, kDeltaChunk}, "GDN chunk inverses");
  acts.add(s.core, {N_, value_dim_}, "GDN delta-rule output");
  acts.add(s.norm_rstd, {N_ * Hv_}, "GDN gated norm rstd");
  lists.pick(r.full || r.gdn_norm_out).add(s.normed, {N_, value_dim_}, "GDN gated norm output");
  grads.add(s.d_qkv_raw, {N_, conv_dim_}, "GDN qkv projection gradient");
  grads.add(s.d_z, {N_, value_dim_}, "GDN z projection gradient");
  grads.add(s.d_b, {N_, Hv_}, "GDN b projection gradient");
  grads.add(s.d_a, {N_, Hv_}, "GDN a projection gradient");
  grads.add(s.d_out, {N_, C_}, "GDN output-projection gradient");
}

void GatedDeltaNet::forward(Saved& s, float* out_local, const float* in, float* partial,
                            const PackedRows& packed) const {
  s.packed = packed;
  const WeightLayout L = WeightLayout::OutIn;
  k_.linear_forward(s.qkv_raw.data(), in, params_.value(qkv_w_), nullptr, N_, C_, conv_dim_, L);
  k_.linear_forward(s.z.data(), in, params_.value(z_w_), nullptr, N_, C_, value_dim_, L);
  k_.linear_forward(s.b.data(), in, params_.value(b_w_), nullptr, N_, C_, Hv_, L);
  k_.linear_forward(s.a.data(), in, params_.value(a_w_), nullptr, N_, C_, Hv_, L);
  float* qkv = s.qkv.data();  // (N, conv_dim): q | k | v of every row
  k_.causal_conv1d_silu_forward(qkv, s.qkv_raw.data(), params_.value(conv_w_), packed.key_start, B_, T_,
                                conv_dim_, K_, conv_dim_);
  k_.l2norm_forward(qkv, s.q_rstd.data(), qkv, N_, Hk_, dk_, conv_dim_);
  k_.l2norm_forward(qkv + key_dim_, s.k_rstd.data(), qkv + key_dim_, N_, Hk_, dk_, conv_dim_);
  k_.gdn_gate_forward(s.beta.data(), s.g.data(), s.b.data(), s.a.data(), params_.value(A_log_),
                      params_.value(dt_bias_), N_, Hv_);
  k_.gated_delta_rule_forward(s.core.data(), nullptr, s.Ainv.data(), qkv, qkv + key_dim_, qkv + 2 * key_dim_,
                              s.beta.data(), s.g.data(), nullptr, packed.key_start, B_, T_, Hk_, Hv_, dk_,
                              dv_, conv_dim_, conv_dim_);
  norm_out_forward(s);
  float* product = tp_.size() > 1 ? partial : out_local;
  k_.linear_forward(product, s.normed.data(), params_.value(out_w_), nullptr, N_, value_dim_, C_, L);
  tp_.reduce_rows(product, out_local, N_, C_);
}

void GatedDeltaNet::list_recurrent_state(RecurrentState& r, TensorList& list) const {
  list.add(r.history, {K_ - 1, conv_dim_}, "GDN conv history (its last K-1 inputs)");
  list.add(r.state, {Hv_, dk_, dv_}, "GDN delta-rule state");
  list.add(r.window, {K_ - 1 + T_, conv_dim_}, "GDN decode conv input (history, then the new rows)");
  list.add(r.conv_out, {K_ - 1 + T_, conv_dim_}, "GDN decode conv output");
  list.add(r.state_in, {Hv_, dk_, dv_}, "GDN decode delta-rule state before a prefill");
}

// The forward's steps on n rows. The conv runs over the window [history | new rows]: its first
// K−1 outputs (history seen with zeros before it) are not used, each later one sees exactly the
// K−1 inputs before its row, as in the whole sequence.
void GatedDeltaNet::decode(Saved& s, RecurrentState& r, float* out, const float* in, int64_t n) const {
  TESSEL_CHECK(B_ == 1 && tp_.size() == 1 && n <= T_, "GDN decode: one sequence, one process, {} rows within {}",
               n, T_);
  const WeightLayout L = WeightLayout::OutIn;
  const int64_t h = K_ - 1;
  float* window = r.window.data();  // (h + n, conv_dim)
  k_.copy(window, r.history.data(), h * conv_dim_);
  k_.linear_forward(window + h * conv_dim_, in, params_.value(qkv_w_), nullptr, n, C_, conv_dim_, L);
  k_.linear_forward(s.z.data(), in, params_.value(z_w_), nullptr, n, C_, value_dim_, L);
  k_.linear_forward(s.b.data(), in, params_.value(b_w_), nullptr, n, C_, Hv_, L);
  k_.linear_forward(s.a.data(), in, params_.value(a_w_), nullptr, n, C_, Hv_, L);
  k_.causal_conv1d_silu_forward(r.conv_out.data(), window, params_.value(conv_w_), nullptr, 1, h + n,
                                conv_dim_, K_, conv_dim_);
  k_.copy(r.history.data(), window + n * conv_dim_, h * conv_dim_);
  float* qkv = r.conv_out.data() + h * conv_dim_;  // (n, conv_dim): q | k | v of the new rows
  k_.l2norm_forward(qkv, s.q_rstd.data(), qkv, n, Hk_, dk_, conv_dim_);
  k_.l2norm_forward(qkv + key_dim_, s.k_rstd.data(), qkv + key_dim_, n, Hk_, dk_, conv_dim_);
  k_.gdn_gate_forward(s.beta.data(), s.g.data(), s.b.data(), s.a.data(), params_.value(A_log_),
                      params_.value(dt_bias_), n, Hv_);
  if (n == 1) {
    k_.gated_delta_rule_step(s.core.data(), r.state.data(), qkv, qkv + key_dim_, qkv + 2 * key_dim_,
                             s.beta.data(), s.g.data(), 1, Hk_, Hv_, dk_, dv_, conv_dim_, conv_dim_);
  } else {
    k_.copy(r.state_in.data(), r.state.data(), Hv_ * dk_ * dv_);
    k_.gated_delta_rule_forward(s.core.data(), r.state.data(), s.Ainv.data(), qkv, qkv + key_dim_,
                                qkv + 2 * key_dim_, s.beta.data(), s.g.data(), r.state_in.data(), nullptr, 1,
                                n, Hk_, Hv_, dk_, dv_, conv_dim_, conv_dim_);
  }
  k_.gated_rmsnorm_forward(s.normed.data(), s.norm_rstd.data(), s.core.data(), s.z.data(),
                           params_.value(norm_w_), n * Hv_, dv_, eps_);
  k_.linear_forward(out, s.normed.data(), params_.value(out_w_), nullptr, n, value_dim_, C_, L);
}

// The forward's list reversed. The delta rule's dq, dk go to d_qk_ (rows of conv_dim, the
// layout it read q and k in) and its dv straight into the conv output's gradient d_conv_, whose
// q and k parts the l2norms' backward then fill.
void GatedDeltaNet::backward_input(Saved& s, float* d_in, const float* d_out_local, const float* in) {
  const WeightLayout L = WeightLayout::OutIn;
  tp_.gather_rows(d_out_local, s.d_out.data(), N_, C_);  // a copy without sequence parallel
  d_normed_.zero();
  k_.linear_backward(d_normed_.data(), nullptr, nullptr, s.d_out.data(), s.normed.data(),
                     params_.value(out_w_), N_, value_dim_, C_, L);
  d_core_.zero();
  s.d_z.zero();
  k_.gated_rmsnorm_backward(d_core_.data(), s.d_z.data(), params_.grad(norm_w_), d_normed_.data(),
                            s.core.data(), s.z.data(), params_.value(norm_w_), s.norm_rstd.data(), N_ * Hv_,
                            dv_);
  const float* qkv = s.qkv.data();
  float* d_qk = d_qk_.data();
  float* d_conv = d_conv_.data();
  d_qk_.zero();
  d_conv_.zero();
  d_beta_.zero();
  d_g_.zero();
  k_.gated_delta_rule_backward(d_qk, d_qk + key_dim_, d_conv + 2 * key_dim_, d_beta_.data(), d_g_.data(),
                               nullptr, d_core_.data(), nullptr, s.Ainv.data(), qkv, qkv + key_dim_,
                               qkv + 2 * key_dim_, s.beta.data(), s.g.data(), nullptr, s.packed.key_start,
                               B_, T_, Hk_, Hv_, dk_, dv_, conv_dim_, conv_dim_);
  s.d_b.zero();
  s.d_a.zero();
  k_.gdn_gate_backward(s.d_b.data(), s.d_a.data(), params_.grad(A_log_), params_.grad(dt_bias_),
                       d_beta_.data(), d_g_.data(), s.b.data(), s.a.data(), params_.value(A_log_),
                       params_.value(dt_bias_), N_, Hv_);
  k_.l2norm_backward(d_conv, d_qk, qkv, s.q_rstd.data(), N_, Hk_, dk_, conv_dim_);
  k_.l2norm_backward(d_conv + key_dim_, d_qk + key_dim_, qkv + key_dim_, s.k_rstd.data(), N_, Hk_, dk_,
                     conv_dim_);
  s.d_qkv_raw.zero();
  k_.causal_conv1d_silu_backward(s.d_qkv_raw.data(), params_.grad(conv_w_), d_conv, s.qkv_raw.data(),
                                 params_.value(conv_w_), s.packed.key_start, B_, T_, conv_dim_, K_, conv_dim_);
  k_.linear_backward(d_in, nullptr, nullptr, s.d_qkv_raw.data(), in, params_.value(qkv_w_), N_, C_,
                     conv_dim_, L);
  k_.linear_backward(d_in, nullptr, nullptr, s.d_z.data(), in, params_.value(z_w_), N_, C_, value_dim_, L);
  k_.linear_backward(d_in, nullptr, nullptr, s.d_b.data(), in, params_.value(b_w_), N_, C_, Hv_, L);
  k_.linear_backward(d_in, nullptr, nullptr, s.d_a.data(), in, params_.value(a_w_), N_, C_, Hv_, L);
}

void GatedDeltaNet::backward_weight(Saved& s, const float* in) const {
  const WeightLayout L = WeightLayout::OutIn;
  k_.linear_backward(nullptr, params_.grad(out_w_), nullptr, s.d_out.data(), s.normed.data(),
                     params_.value(out_w_), N_, value_dim_, C_, L);
  k_.linear_backward(nullptr, params_.grad(qkv_w_), nullptr, s.d_qkv_raw.data(), in, params_.value(qkv_w_),
                     N_, C_, conv_dim_, L);
  k_.linear_backward(nullptr, params_.grad(z_w_), nullptr, s.d_z.data(), in, params_.value(z_w_), N_, C_,
                     value_dim_, L);
  k_.linear_backward(nullptr, params_.grad(b_w_), nullptr, s.d_b.data(), in, params_.value(b_w_), N_, C_,
                     Hv_, L);
  k_.linear_backward(nullptr, params_.grad(a_w_), nullptr, s.d_a.data(), in, params_.value(a_w_), N_, C_,
                     Hv_, L);
}

void GatedDeltaNet::norm_out_forward(Saved& s) const {
  k_.gated_rmsnorm_forward(s.normed.data(), s.norm_rstd.data(), s.core.data(), s.z.data(), params_.value(norm_w_),
                           N_ * Hv_, dv_, eps_);
}

std::vector<int> GatedDeltaNet::input_half_params() const { return {conv_w_, dt_bias_, A_log_, norm_w_}; }

std::vector<int> GatedDeltaNet::weight_half_params() const { return {qkv_w_, z_w_, b_w_, a_w_, out_w_}; }

}  // namespace tessel
