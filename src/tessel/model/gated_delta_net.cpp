#include "tessel/model/gated_delta_net.h"

#include <fmt/format.h>

#include <array>

#include "tessel/core/error.h"

namespace tessel {

// Hugging Face's order and names (Qwen3.5's flat projections), split over TP by heads as
// Megatron splits GDN: each rank owns Hk/TP whole key heads and the Hv/TP value heads that read
// them (contiguous ranges: value head j reads key head j / (Hv/Hk)); a CP rank computes on its
// 1/CP share of those, again contiguous, so the grouping holds.
GatedDeltaNet::GatedDeltaNet(const LayerContext& ctx, int layer)
    : k_(ctx.k),
      params_(ctx.registry),
      tp_(ctx.tp),
      cp_(ctx.cp),
      B_(ctx.B),
      T_(ctx.T_l),
      N_(ctx.B * ctx.T_l),
      C_(ctx.cfg.hidden_size),
      P_(ctx.cp.size()),
      Ts_(ctx.T_l * ctx.cp.size()),
      Ns_(ctx.B * ctx.T_l * ctx.cp.size()),
      Hk_(ctx.cfg.linear.num_key_heads / (ctx.tp.size() * ctx.cp.size())),
      Hv_(ctx.cfg.linear.num_value_heads / (ctx.tp.size() * ctx.cp.size())),
      dk_(ctx.cfg.linear.key_head_dim),
      dv_(ctx.cfg.linear.value_head_dim),
      K_(ctx.cfg.linear.conv_kernel_dim),
      key_dim_(Hk_ * dk_),
      value_dim_(Hv_ * dv_),
      conv_dim_(2 * key_dim_ + value_dim_),
      eps_(ctx.cfg.norm_epsilon) {
  ParamRegistry& registry = ctx.registry;
  const ModelConfig& cfg = ctx.cfg;
  const TensorParallel& tp = ctx.tp;
  const ContextParallel& cp = ctx.cp;
  const LayerBuffers& buffers = ctx.buffers;
  const int ranks = tp.size() * cp.size();
  TESSEL_CHECK(cfg.linear.num_key_heads % ranks == 0 && cfg.linear.num_value_heads % ranks == 0,
               "Gated DeltaNet layer {}: {} key and {} value heads do not split over TP {} × CP {}", layer,
               cfg.linear.num_key_heads, cfg.linear.num_value_heads, tp.size(), cp.size());
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
    return registry.add(p + name, std::move(shape), ParamInit::Normal, ctx.cfg.init_method_std, true, std::move(shard));
  };
  qkv_w_ = weight("in_proj_qkv.weight", {cfg.linear.conv_dim(), C_}, split(0, qkv_sections));
  z_w_ = weight("in_proj_z.weight", {value_dim, C_}, split(0));
  b_w_ = weight("in_proj_b.weight", {Hv, C_}, split(0));
  a_w_ = weight("in_proj_a.weight", {Hv, C_}, split(0));
  conv_w_ = weight("conv1d.weight", {cfg.linear.conv_dim(), 1, K_}, split(0, qkv_sections));
  // Megatron decays neither (1-D); HF: dt_bias 1, A = U(0, 16), A_log = log A.
  dt_bias_ = registry.add(p + "dt_bias", {Hv}, ParamInit::Ones, 0, false, split(0));
  A_log_ = registry.add(p + "A_log", {Hv}, ParamInit::LogUniform, 16.0f, false, split(0));
  // A plain gain over dv, shared by every value head: each TP rank's gradient is its heads' part
  // (and each CP rank's its heads' share of that, summed over CP with every gradient).
  norm_w_ = registry.add(p + "norm.weight", {dv_}, ParamInit::Ones, 0, false);
  registry.params()[norm_w_].grad_partial_over_tp = true;
  out_w_ = weight("out_proj.weight", {C_, value_dim}, split(1));

  TensorList& scratch = buffers.scratch;
  scratch.add(d_qk_, {Ns_, conv_dim_}, "GDN q, k gradients (the delta rule's layout)");
  scratch.add(d_conv_, {Ns_, conv_dim_}, "GDN convolution output gradient");
  scratch.add(d_core_, {Ns_, value_dim_}, "GDN delta-rule output gradient");
  scratch.add(d_normed_, {Ns_, value_dim_}, "GDN gated-norm output gradient");
  scratch.add(d_beta_, {Ns_, Hv_}, "GDN beta gradient");
  scratch.add(d_g_, {Ns_, Hv_}, "GDN decay gradient");
  if (P_ > 1) {
    scratch.add(conv_w_cp_, {conv_dim_, K_}, "GDN conv1d rows of this CP rank's channels");
    scratch.add(d_conv_w_cp_, {conv_dim_, K_}, "GDN conv1d gradient of this CP rank's channels");
  }
}

std::vector<CpColumns> GatedDeltaNet::sections(float* qkv, float* z, float* b, float* a, int64_t ranks) const {
  const int64_t qkv_ld = ranks * conv_dim_;
  return {{qkv, qkv_ld, key_dim_},
          {qkv + ranks * key_dim_, qkv_ld, key_dim_},
          {qkv + 2 * ranks * key_dim_, qkv_ld, value_dim_},
          {z, ranks * value_dim_, value_dim_},
          {b, ranks * Hv_, Hv_},
          {a, ranks * Hv_, Hv_}};
}

namespace {
// One section [Q | K | V] of conv1d's rows (each a channel's K taps): where CP rank `rank`'s share
// starts in the TP shard and in the rank's copy, and its rows.
struct ConvRows {
  int64_t shard_row, local_row, rows;
};
std::array<ConvRows, 3> conv_rows(int64_t rank, int64_t P, int64_t key_dim, int64_t value_dim) {
  return {{{rank * key_dim, 0, key_dim},
           {(P + rank) * key_dim, key_dim, key_dim},
           {2 * P * key_dim + rank * value_dim, 2 * key_dim, value_dim}}};
}
}  // namespace

const float* GatedDeltaNet::conv_weight() const {
  const float* shard = params_.value(conv_w_);
  if (P_ == 1) return shard;
  for (const ConvRows& c : conv_rows(cp_.rank(), P_, key_dim_, value_dim_))
    k_.copy(conv_w_cp_.data() + c.local_row * K_, shard + c.shard_row * K_, c.rows * K_);
  return conv_w_cp_.data();
}

// The other ranks' channels get theirs on their ranks (summed over CP with every gradient).
void GatedDeltaNet::add_conv_weight_grad(const float* local) const {
  float* shard = params_.grad(conv_w_);
  for (const ConvRows& c : conv_rows(cp_.rank(), P_, key_dim_, value_dim_))
    k_.residual_forward(shard + c.shard_row * K_, shard + c.shard_row * K_, local + c.local_row * K_, c.rows * K_);
}

// Whole sequences' document starts: the rows' own without CP.
const int32_t* GatedDeltaNet::document_starts(const PackedRows& packed) const {
  if (P_ == 1) return packed.key_start;
  TESSEL_CHECK(packed.key_start == nullptr || packed.sequence_key_start != nullptr,
               "Gated DeltaNet under CP {}: packed documents without the whole sequences' starts", P_);
  return packed.sequence_key_start;
}

// Under CP the tensors of whole sequences have Ns rows; those of this rank's rows (normed and the
// projections' gradients) N rows CP times as wide, the same size.
void GatedDeltaNet::list_saved(Saved& s, SavedLists& lists, const LayerRecompute& r) const {
  TensorList& acts = lists.pick(r.full);
  TensorList& grads = lists.pick(r.weights_in_input_pass());
  acts.add(s.qkv_raw, {Ns_, conv_dim_}, "GDN qkv projection");
  acts.add(s.qkv, {Ns_, conv_dim_}, "GDN q, k, v (convolved, q and k l2-normed)");
  acts.add(s.q_rstd, {Ns_, Hk_}, "GDN q l2norm rstd");
  acts.add(s.k_rstd, {Ns_, Hk_}, "GDN k l2norm rstd");
  acts.add(s.z, {Ns_, value_dim_}, "GDN output gate input z");
  acts.add(s.b, {Ns_, Hv_}, "GDN beta input b");
  acts.add(s.a, {Ns_, Hv_}, "GDN decay input a");
  acts.add(s.beta, {Ns_, Hv_}, "GDN beta");
  acts.add(s.g, {Ns_, Hv_}, "GDN log decay");
  acts.add(s.Ainv, {B_, Hv_, delta_rule_chunks(Ts_), kDeltaChunk, kDeltaChunk}, "GDN chunk inverses");
  acts.add(s.core, {Ns_, value_dim_}, "GDN delta-rule output");
  acts.add(s.norm_rstd, {Ns_ * Hv_}, "GDN gated norm rstd");
  lists.pick(r.full || r.gdn_norm_out).add(s.normed, {N_, P_ * value_dim_}, "GDN gated norm output");
  grads.add(s.d_qkv_raw, {N_, P_ * conv_dim_}, "GDN qkv projection gradient");
  grads.add(s.d_z, {N_, P_ * value_dim_}, "GDN z projection gradient");
  grads.add(s.d_b, {N_, P_ * Hv_}, "GDN b projection gradient");
  grads.add(s.d_a, {N_, P_ * Hv_}, "GDN a projection gradient");
  grads.add(s.d_out, {N_, C_}, "GDN output-projection gradient");
}

// in_proj on this rank's rows for every head of the TP rank; under CP into the memory of the
// whole-sequence tensors, which the all-to-all then fills in place. The rest on Ns rows.
void GatedDeltaNet::forward(Saved& s, float* out_local, const float* in, float* partial,
                            const PackedRows& packed) const {
  s.packed = packed;
  const WeightLayout L = WeightLayout::OutIn;
  k_.linear_forward(s.qkv_raw.data(), in, params_.value(qkv_w_), nullptr, N_, C_, P_ * conv_dim_, L);
  k_.linear_forward(s.z.data(), in, params_.value(z_w_), nullptr, N_, C_, P_ * value_dim_, L);
  k_.linear_forward(s.b.data(), in, params_.value(b_w_), nullptr, N_, C_, P_ * Hv_, L);
  k_.linear_forward(s.a.data(), in, params_.value(a_w_), nullptr, N_, C_, P_ * Hv_, L);
  if (P_ > 1)
    cp_.sequence_to_heads(sections(s.qkv_raw.data(), s.z.data(), s.b.data(), s.a.data(), P_),
                          sections(s.qkv_raw.data(), s.z.data(), s.b.data(), s.a.data(), 1), B_, T_);
  const int32_t* starts = document_starts(packed);
  const int64_t head0 = cp_.rank() * Hv_;  // this rank's first value head in the TP shard
  float* qkv = s.qkv.data();  // (Ns, conv_dim): q | k | v of every row
  k_.causal_conv1d_silu_forward(qkv, s.qkv_raw.data(), conv_weight(), starts, B_, Ts_, conv_dim_, K_, conv_dim_);
  k_.l2norm_forward(qkv, s.q_rstd.data(), qkv, Ns_, Hk_, dk_, conv_dim_);
  k_.l2norm_forward(qkv + key_dim_, s.k_rstd.data(), qkv + key_dim_, Ns_, Hk_, dk_, conv_dim_);
  k_.gdn_gate_forward(s.beta.data(), s.g.data(), s.b.data(), s.a.data(), params_.value(A_log_) + head0,
                      params_.value(dt_bias_) + head0, Ns_, Hv_);
  k_.gated_delta_rule_forward(s.core.data(), nullptr, s.Ainv.data(), qkv, qkv + key_dim_, qkv + 2 * key_dim_,
                              s.beta.data(), s.g.data(), nullptr, starts, B_, Ts_, Hk_, Hv_, dk_, dv_, conv_dim_,
                              conv_dim_);
  norm_out_forward(s);
  float* product = tp_.size() > 1 ? partial : out_local;
  k_.linear_forward(product, s.normed.data(), params_.value(out_w_), nullptr, N_, P_ * value_dim_, C_, L);
  tp_.reduce_rows(product, out_local, N_, C_);
}

void GatedDeltaNet::list_decode_state(RecurrentState& r, TensorList& list) const {
  list.add(r.history, {K_ - 1, conv_dim_}, "GDN conv history (its last K-1 inputs)");
  list.add(r.state, {Hv_, dk_, dv_}, "GDN delta-rule state");
  list.add(r.window, {K_ - 1 + T_, conv_dim_}, "GDN decode conv input (history, then the new rows)");
  list.add(r.conv_out, {K_ - 1 + T_, conv_dim_}, "GDN decode conv output");
  list.add(r.state_in, {Hv_, dk_, dv_}, "GDN decode delta-rule state before a prefill");
}

// The forward's steps on n rows. The conv runs over the window [history | new rows]: its first
// K−1 outputs (history seen with zeros before it) are not used, each later one sees exactly the
// K−1 inputs before its row, as in the whole sequence.
void GatedDeltaNet::decode(Saved& s, RecurrentState& r, float* out, const float* in, int64_t /*start*/,
                           int64_t n) const {
  TESSEL_CHECK(B_ == 1 && tp_.size() == 1 && P_ == 1 && n <= T_, "GDN decode: one sequence, one process, {} rows within {}",
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
// q and k parts the l2norms' backward then fill. Under CP, out_proj's input gradient (this rank's
// rows) goes to whole sequences in place, and the projections' output gradients come back to this
// rank's rows in place.
void GatedDeltaNet::backward_input(Saved& s, float* d_in, const float* d_out_local, const float* in) {
  const WeightLayout L = WeightLayout::OutIn;
  tp_.gather_rows(d_out_local, s.d_out.data(), N_, C_);  // a copy without sequence parallel
  float* d_normed = d_normed_.data();
  d_normed_.zero();
  k_.linear_backward(d_normed, nullptr, nullptr, s.d_out.data(), s.normed.data(), params_.value(out_w_), N_,
                     P_ * value_dim_, C_, L);
  if (P_ > 1)
    cp_.sequence_to_heads({{d_normed, P_ * value_dim_, value_dim_}}, {{d_normed, value_dim_, value_dim_}}, B_, T_);
  d_core_.zero();
  s.d_z.zero();
  k_.gated_rmsnorm_backward(d_core_.data(), s.d_z.data(), params_.grad(norm_w_), d_normed, s.core.data(),
                            s.z.data(), params_.value(norm_w_), s.norm_rstd.data(), Ns_ * Hv_, dv_);
  const int32_t* starts = document_starts(s.packed);
  const float* qkv = s.qkv.data();
  float* d_qk = d_qk_.data();
  float* d_conv = d_conv_.data();
  d_qk_.zero();
  d_conv_.zero();
  d_beta_.zero();
  d_g_.zero();
  k_.gated_delta_rule_backward(d_qk, d_qk + key_dim_, d_conv + 2 * key_dim_, d_beta_.data(), d_g_.data(),
                               nullptr, d_core_.data(), nullptr, s.Ainv.data(), qkv, qkv + key_dim_,
                               qkv + 2 * key_dim_, s.beta.data(), s.g.data(), nullptr, starts, B_, Ts_, Hk_,
                               Hv_, dk_, dv_, conv_dim_, conv_dim_);
  s.d_b.zero();
  s.d_a.zero();
  const int64_t head0 = cp_.rank() * Hv_;
  k_.gdn_gate_backward(s.d_b.data(), s.d_a.data(), params_.grad(A_log_) + head0, params_.grad(dt_bias_) + head0,
                       d_beta_.data(), d_g_.data(), s.b.data(), s.a.data(), params_.value(A_log_) + head0,
                       params_.value(dt_bias_) + head0, Ns_, Hv_);
  k_.l2norm_backward(d_conv, d_qk, qkv, s.q_rstd.data(), Ns_, Hk_, dk_, conv_dim_);
  k_.l2norm_backward(d_conv + key_dim_, d_qk + key_dim_, qkv + key_dim_, s.k_rstd.data(), Ns_, Hk_, dk_,
                     conv_dim_);
  s.d_qkv_raw.zero();
  float* d_conv_w = P_ > 1 ? d_conv_w_cp_.data() : params_.grad(conv_w_);
  if (P_ > 1) d_conv_w_cp_.zero();
  k_.causal_conv1d_silu_backward(s.d_qkv_raw.data(), d_conv_w, d_conv, s.qkv_raw.data(), conv_weight(), starts,
                                 B_, Ts_, conv_dim_, K_, conv_dim_);
  if (P_ > 1) {
    add_conv_weight_grad(d_conv_w);
    cp_.heads_to_sequence(sections(s.d_qkv_raw.data(), s.d_z.data(), s.d_b.data(), s.d_a.data(), 1),
                          sections(s.d_qkv_raw.data(), s.d_z.data(), s.d_b.data(), s.d_a.data(), P_), B_, T_);
  }
  k_.linear_backward(d_in, nullptr, nullptr, s.d_qkv_raw.data(), in, params_.value(qkv_w_), N_, C_,
                     P_ * conv_dim_, L);
  k_.linear_backward(d_in, nullptr, nullptr, s.d_z.data(), in, params_.value(z_w_), N_, C_, P_ * value_dim_, L);
  k_.linear_backward(d_in, nullptr, nullptr, s.d_b.data(), in, params_.value(b_w_), N_, C_, P_ * Hv_, L);
  k_.linear_backward(d_in, nullptr, nullptr, s.d_a.data(), in, params_.value(a_w_), N_, C_, P_ * Hv_, L);
}

void GatedDeltaNet::backward_weight(Saved& s, const float* in) const {
  const WeightLayout L = WeightLayout::OutIn;
  k_.linear_backward(nullptr, params_.grad(out_w_), nullptr, s.d_out.data(), s.normed.data(),
                     params_.value(out_w_), N_, P_ * value_dim_, C_, L);
  k_.linear_backward(nullptr, params_.grad(qkv_w_), nullptr, s.d_qkv_raw.data(), in, params_.value(qkv_w_),
                     N_, C_, P_ * conv_dim_, L);
  k_.linear_backward(nullptr, params_.grad(z_w_), nullptr, s.d_z.data(), in, params_.value(z_w_), N_, C_,
                     P_ * value_dim_, L);
  k_.linear_backward(nullptr, params_.grad(b_w_), nullptr, s.d_b.data(), in, params_.value(b_w_), N_, C_,
                     P_ * Hv_, L);
  k_.linear_backward(nullptr, params_.grad(a_w_), nullptr, s.d_a.data(), in, params_.value(a_w_), N_, C_,
                     P_ * Hv_, L);
}

// Under CP on whole sequences, then to this rank's rows in place (a recompute repeats the move).
void GatedDeltaNet::norm_out_forward(Saved& s) const {
  float* normed = s.normed.data();
  k_.gated_rmsnorm_forward(normed, s.norm_rstd.data(), s.core.data(), s.z.data(), params_.value(norm_w_),
                           Ns_ * Hv_, dv_, eps_);
  if (P_ > 1)
    cp_.heads_to_sequence({{normed, value_dim_, value_dim_}}, {{normed, P_ * value_dim_, value_dim_}}, B_, T_);
}

std::vector<int> GatedDeltaNet::input_half_params() const { return {conv_w_, dt_bias_, A_log_, norm_w_}; }

std::vector<int> GatedDeltaNet::weight_half_params() const { return {qkv_w_, z_w_, b_w_, a_w_, out_w_}; }

}  // namespace tessel
