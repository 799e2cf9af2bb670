#include "tessel/model/attention.h"

#include <fmt/format.h>

#include <cmath>

#include "tessel/core/error.h"

namespace tessel {

// Parameters in Hugging Face order with Hugging Face names and global shapes (GPT-2's Conv1D
// weights [in, out], Llama's nn.Linear [out, in]), each with the slice this TP rank holds.
// Initialisation as Megatron (layer.h): normal(0, 0.02), the output projection 0.02/sqrt(2·layers), biases
// 0, QK-norm weights 1.
Attention::Attention(const LayerContext& ctx, int layer)
    : k_(ctx.k),
      params_(ctx.registry),
      tp_(ctx.tp),
      cp_(ctx.cp),
      fused_(ctx.cfg.arch == Arch::GPT2),
      gated_(ctx.cfg.attention_output_gate),
      layout_(fused_ ? WeightLayout::InOut : WeightLayout::OutIn),
      B_(ctx.B),
      T_(ctx.T_l),
      N_(ctx.B * ctx.T_l),
      C_(ctx.cfg.hidden_size),
      D_(ctx.cfg.head_dim()),
      rot_(ctx.cfg.rotary_dim()),
      H_l_(ctx.cfg.num_attention_heads / ctx.tp.size()),
      G_l_(ctx.cfg.query_groups_per_rank(ctx.tp.size())),
      G_(ctx.cfg.query_groups()),
      kv_replicas_(ctx.tp.size() > ctx.cfg.query_groups() ? ctx.tp.size() / ctx.cfg.query_groups() : 1),
      positions_(ctx.positions),
      rope_cos_(ctx.rope_cos),
      rope_sin_(ctx.rope_sin),
      layer_(layer),
      attention_dropout_(ctx.cfg.attention_dropout),
      seed_(ctx.seed) {
  ParamRegistry& registry = ctx.registry;
  const ModelConfig& cfg = ctx.cfg;
  const TensorParallel& tp = ctx.tp;
  const LayerBuffers& buffers = ctx.buffers;
  const float out_std = output_init_std(cfg);
  const int64_t C = C_;
  const int64_t HD = static_cast<int64_t>(cfg.num_attention_heads) * D_;
  const int64_t GD = static_cast<int64_t>(cfg.query_groups()) * D_;
  auto split = [&](int dim, std::vector<int64_t> sections = {}) {
    return ShardSpec{.dim = dim, .group = ShardGroup::TP, .index = tp.rank(), .count = tp.size(),
                     .sections = std::move(sections)};
  };
  auto weight = [&](const std::string& name, Shape shape, float std, ShardSpec shard) {
    return registry.add(name, std::move(shape), ParamInit::Normal, std, true, shard);
  };
  auto bias = [&](const std::string& name, int64_t n, ShardSpec shard) {
    return registry.add(name, {n}, ParamInit::Zeros, 0, false, shard);
  };
  if (fused_) {
    const std::string p = fmt::format("transformer.h.{}.attn.", layer);
    qkv_w_ = weight(p + "c_attn.weight", {C, 3 * C}, cfg.init_method_std, split(1, {C, C, C}));
    qkv_b_ = bias(p + "c_attn.bias", 3 * C, split(0, {C, C, C}));
    proj_w_ = weight(p + "c_proj.weight", {C, C}, out_std, split(0));
    proj_b_ = bias(p + "c_proj.bias", C, ShardSpec{});
    return;
  }
  const std::string p = cfg.layer_prefix(layer) + "self_attn.";
  // With the gate, each head's 2·D rows [q_h | g_h] stay together on its TP rank.
  q_w_ = weight(p + "q_proj.weight", {gated_ ? 2 * HD : HD, C}, cfg.init_method_std, split(0));
  if (cfg.add_qkv_bias) q_b_ = bias(p + "q_proj.bias", HD, split(0));
  k_w_ = weight(p + "k_proj.weight", {GD, C}, cfg.init_method_std, split(0));
  if (cfg.add_qkv_bias) k_b_ = bias(p + "k_proj.bias", GD, split(0));
  v_w_ = weight(p + "v_proj.weight", {GD, C}, cfg.init_method_std, split(0));
  if (cfg.add_qkv_bias) v_b_ = bias(p + "v_proj.bias", GD, split(0));
  proj_w_ = weight(p + "o_proj.weight", {C, HD}, out_std, split(1));
  if (kv_replicas_ > 1) {
    TensorList& scratch = buffers.scratch;
    scratch.add(kv_w_full_, {2, GD, C}, "attention k, v weights gathered over TP (replicated groups)");
    scratch.add(d_kv_w_full_, {GD, C}, "attention k or v weight gradient before its reduce-scatter");
    scratch.add(d_kv_w_local_, {GD / tp.size(), C}, "attention k or v weight gradient, this rank's slice");
    if (cfg.add_qkv_bias) {
      scratch.add(kv_b_full_, {2, GD}, "attention k, v biases gathered over TP");
      scratch.add(d_kv_b_full_, {GD}, "attention k or v bias gradient before its reduce-scatter");
      scratch.add(d_kv_b_local_, {GD / tp.size()}, "attention k or v bias gradient, this rank's slice");
    }
  }
  if (cfg.qk_layernorm) {
    // One weight per head dimension, shared by all heads: replicated over TP, each rank's gradient
    // from its own heads only, summed over TP by GradSync (Param::grad_partial_over_tp).
    q_norm_.emplace(k_, registry, model_norm(cfg, NormKind::RMSNorm, p + "q_norm.weight", D_));
    k_norm_.emplace(k_, registry, model_norm(cfg, NormKind::RMSNorm, p + "k_norm.weight", D_));
    registry.params()[q_norm_->weight()].grad_partial_over_tp = true;
    registry.params()[k_norm_->weight()].grad_partial_over_tp = true;
  }
}

void Attention::list_saved(Saved& s, SavedLists& lists, const LayerRecompute& r) const {
  const int64_t HD = H_l_ * D_, GD = G_l_ * D_;
  TensorList& acts = lists.pick(r.full);
  TensorList& grads = lists.pick(r.weights_in_input_pass());
  if (fused_) {
    acts.add(s.qkv, {N_, 3 * HD}, "attention qkv");
    grads.add(s.d_qkv, {N_, 3 * HD}, "attention qkv gradient");
  } else {
    acts.add(s.q, {N_, HD}, "attention q");
    acts.add(s.k, {N_, GD}, "attention k");
    acts.add(s.v, {N_, GD}, "attention v");
    grads.add(s.d_q, {N_, HD}, "attention q gradient");
    grads.add(s.d_k, {N_, GD}, "attention k gradient");
    grads.add(s.d_v, {N_, GD}, "attention v gradient");
    if (q_norm_) {
      acts.add(s.q_raw, {N_, HD}, "attention q before q-norm");
      acts.add(s.k_raw, {N_, GD}, "attention k before k-norm");
      q_norm_->list_saved(s.q_norm, acts, N_ * H_l_, "q-norm");
      k_norm_->list_saved(s.k_norm, acts, N_ * G_l_, "k-norm");
    }
  }
  acts.add(s.attn, {N_, HD}, "attention output");
  if (gated_) {
    acts.add(s.gate, {N_, HD}, "attention output gate");
    acts.add(s.gated, {N_, HD}, "attention output, gated");
    grads.add(s.d_gate, {N_, HD}, "attention output gate gradient");
  }
  lists.pick(r.full || r.core_attn).add(s.lse, {B_, H_l_, T_}, "attention log-sum-exp");
  grads.add(s.d_out, {N_, C_}, "attention output-projection gradient");
}

void Attention::core_forward(Saved& s) const {
  const int64_t HD = H_l_ * D_, GD = G_l_ * D_;
  if (fused_) {
    const float* qkv = s.qkv.data();  // (N, 3·H_l·D): q | k | v of this rank's heads
    cp_.attention_forward(s.attn.data(), s.lse.data(), qkv, qkv + HD, qkv + 2 * HD, B_, T_, H_l_, H_l_, D_,
                          3 * HD, 3 * HD, 3 * HD, s.packed.key_start, probs_dropout(s));
  } else {
    cp_.attention_forward(s.attn.data(), s.lse.data(), s.q.data(), s.k.data(), s.v.data(), B_, T_, H_l_, G_l_,
                          D_, HD, GD, GD, s.packed.key_start, probs_dropout(s));
  }
}

void Attention::forward(Saved& s, float* out_local, const float* in, float* partial,
                        const PackedRows& packed) const {
  const int64_t HD = H_l_ * D_, GD = G_l_ * D_;
  s.packed = packed;
  if (fused_) {
    k_.linear_forward(s.qkv.data(), in, params_.value(qkv_w_), params_.value(qkv_b_), N_, C_,
                      3 * HD, layout_);
  } else {
    // With --qk-layernorm the projections go to q_raw, k_raw and their per-head norms to q, k.
    float* q = q_norm_ ? s.q_raw.data() : s.q.data();
    float* k = q_norm_ ? s.k_raw.data() : s.k.data();
    if (gated_) gated_q_forward(q, s.gate.data(), in, N_);
    else k_.linear_forward(q, in, params_.value(q_w_), params_.value(q_b_), N_, C_, HD, layout_);
    const KvWeights wk = kv_weights(k_w_, k_b_, 0), wv = kv_weights(v_w_, v_b_, 1);
    k_.linear_forward(k, in, wk.weight, wk.bias, N_, C_, GD, layout_);
    k_.linear_forward(s.v.data(), in, wv.weight, wv.bias, N_, C_, GD, layout_);
    if (q_norm_) {  // as Qwen3: RMSNorm over each head's D values, rows = N·heads
      q_norm_->forward(s.q_norm, s.q.data(), q, N_ * H_l_);
      k_norm_->forward(s.k_norm, s.k.data(), k, N_ * G_l_);
    }
    const int32_t* pos = rope_positions(s);
    k_.rope_forward(s.q.data(), pos, rope_cos_.data(), rope_sin_.data(), N_, H_l_, D_, rot_, HD);
    k_.rope_forward(s.k.data(), pos, rope_cos_.data(), rope_sin_.data(), N_, G_l_, D_, rot_, GD);
  }
  core_forward(s);
  if (gated_) k_.output_gate_forward(s.gated.data(), s.attn.data(), s.gate.data(), N_, H_l_, D_, HD, D_);
  float* product = tp_.size() > 1 ? partial : out_local;
  k_.linear_forward(product, proj_input(s), params_.value(proj_w_), nullptr, N_, HD, C_, layout_);
  tp_.reduce_rows(product, out_local, N_, C_);
  if (proj_b_ >= 0) k_.bias_forward(out_local, params_.value(proj_b_), tp_.local_rows(N_), C_);
}

void Attention::list_decode_state(KvCache& c, TensorList& list) const {
  if (fused_) list.add(c.qkv, {T_, 3 * H_l_ * D_}, "attention q, k, v of the positions read");
  else {
    list.add(c.k, {T_, G_l_ * D_}, "attention keys of the positions read");
    list.add(c.v, {T_, G_l_ * D_}, "attention values of the positions read");
  }
}

// The forward's steps on n rows: the new keys and values go straight into the cache's rows
// start…, and the new queries attend to all start + n cached keys by position (the kernel of a
// block of keys, as context parallelism uses it).
void Attention::decode(Saved& s, KvCache& c, float* out, const float* in, int64_t start,
                       int64_t n) const {
  TESSEL_CHECK(B_ == 1 && tp_.size() == 1 && cp_.size() == 1 && start + n <= T_,
               "attention decode: one sequence, one process, {} + {} positions within {}", start, n, T_);
  const int64_t HD = H_l_ * D_, GD = G_l_ * D_;
  const int32_t* pos = positions_.ints();  // (T_l) 0, 1, …: one sequence
  const float *q, *k, *v;
  int64_t q_ld = HD, kv_ld = GD;
  if (fused_) {
    float* qkv = c.qkv.data() + start * 3 * HD;  // (n, 3·H·D)
    k_.linear_forward(qkv, in, params_.value(qkv_w_), params_.value(qkv_b_), n, C_, 3 * HD, layout_);
    q = qkv;
    k = c.qkv.data() + HD;
    v = c.qkv.data() + 2 * HD;
    q_ld = kv_ld = 3 * HD;
  } else {
    float* k_new = c.k.data() + start * GD;  // (n, G·D)
    float* q_raw = q_norm_ ? s.q_raw.data() : s.q.data();
    float* k_raw = q_norm_ ? s.k_raw.data() : k_new;
    if (gated_) gated_q_forward(q_raw, s.gate.data(), in, n);
    else k_.linear_forward(q_raw, in, params_.value(q_w_), params_.value(q_b_), n, C_, HD, layout_);
    const KvWeights wk = kv_weights(k_w_, k_b_, 0), wv = kv_weights(v_w_, v_b_, 1);
    k_.linear_forward(k_raw, in, wk.weight, wk.bias, n, C_, GD, layout_);
    k_.linear_forward(c.v.data() + start * GD, in, wv.weight, wv.bias, n, C_, GD, layout_);
    if (q_norm_) {
      q_norm_->forward(s.q_norm, s.q.data(), q_raw, n * H_l_);
      k_norm_->forward(s.k_norm, k_new, k_raw, n * G_l_);
    }
    k_.rope_forward(s.q.data(), pos + start, rope_cos_.data(), rope_sin_.data(), n, H_l_, D_, rot_, HD);
    k_.rope_forward(k_new, pos + start, rope_cos_.data(), rope_sin_.data(), n, G_l_, D_, rot_, GD);
    q = s.q.data();
    k = c.k.data();
    v = c.v.data();
  }
  k_.attention_block_forward(s.attn.data(), s.lse.data(), q, k, v, 1, n, start + n, H_l_, G_l_, D_, q_ld,
                             kv_ld, kv_ld, pos + start, pos, nullptr, DropoutSite{});
  if (gated_) k_.output_gate_forward(s.gated.data(), s.attn.data(), s.gate.data(), n, H_l_, D_, HD, D_);
  k_.linear_forward(out, proj_input(s), params_.value(proj_w_), nullptr, n, HD, C_, layout_);
  if (proj_b_ >= 0) k_.bias_forward(out, params_.value(proj_b_), n, C_);
}

void Attention::backward_input(Saved& s, float* d_in, const float* d_out_local, const float* in,
                               float* d_heads, float* d_attn) const {
  const int64_t HD = H_l_ * D_, GD = G_l_ * D_;
  tp_.gather_rows(d_out_local, s.d_out.data(), N_, C_);  // a copy without sequence parallel
  k_.zero(d_heads, N_ * HD);
  k_.linear_backward(d_heads, nullptr, nullptr, s.d_out.data(), proj_input(s),
                     params_.value(proj_w_), N_, HD, C_, layout_);
  if (gated_) {  // d_heads holds the gated output's gradient; the core attention's goes to d_attn
    k_.zero(d_attn, N_ * HD);
    s.d_gate.zero();
    k_.output_gate_backward(d_attn, s.d_gate.data(), d_heads, s.attn.data(), s.gate.data(), N_, H_l_, D_,
                            HD, D_);
  }
  const float* d_core = gated_ ? d_attn : d_heads;
  if (fused_) {
    float* dqkv = s.d_qkv.data();
    const float* qkv = s.qkv.data();
    s.d_qkv.zero();
    cp_.attention_backward(dqkv, dqkv + HD, dqkv + 2 * HD, d_heads, qkv, qkv + HD, qkv + 2 * HD,
                           s.attn.data(), s.lse.data(), B_, T_, H_l_, H_l_, D_, 3 * HD, 3 * HD,
                           3 * HD, s.packed.key_start, probs_dropout(s));
    k_.linear_backward(d_in, nullptr, nullptr, dqkv, in, params_.value(qkv_w_), N_, C_, 3 * HD,
                       layout_);
    return;
  }
  s.d_q.zero();
  s.d_k.zero();
  s.d_v.zero();
  cp_.attention_backward(s.d_q.data(), s.d_k.data(), s.d_v.data(), d_core, s.q.data(), s.k.data(),
                         s.v.data(), s.attn.data(), s.lse.data(), B_, T_, H_l_, G_l_, D_, HD, GD,
                         GD, s.packed.key_start, probs_dropout(s));
  const int32_t* pos = rope_positions(s);
  k_.rope_backward(s.d_q.data(), pos, rope_cos_.data(), rope_sin_.data(), N_, H_l_, D_, rot_, HD);
  k_.rope_backward(s.d_k.data(), pos, rope_cos_.data(), rope_sin_.data(), N_, G_l_, D_, rot_, GD);
  if (q_norm_) qk_norm_backward(s, d_heads);  // d_heads is free again
  if (gated_)
    gated_q_backward_input(d_in, s.d_q.data(), s.d_gate.data());
  else
    k_.linear_backward(d_in, nullptr, nullptr, s.d_q.data(), in, params_.value(q_w_), N_, C_, HD, layout_);
  k_.linear_backward(d_in, nullptr, nullptr, s.d_k.data(), in, kv_weights(k_w_, k_b_, 0).weight, N_, C_, GD,
                     layout_);
  k_.linear_backward(d_in, nullptr, nullptr, s.d_v.data(), in, kv_weights(v_w_, v_b_, 1).weight, N_, C_, GD,
                     layout_);
}

Attention::KvWeights Attention::kv_weights(int weight, int bias, int which) const {
  if (kv_replicas_ == 1) return {params_.value(weight), bias >= 0 ? params_.value(bias) : nullptr};
  // The slices lie in row order over the TP ranks: gathered, they are the whole weight.
  const int64_t GD = G_ * D_, group = tp_.rank() / kv_replicas_;
  float* w = kv_w_full_.data() + which * GD * C_;
  tp_.comm().all_gather(params_.value(weight), w, GD / tp_.size() * C_);
  float* b = nullptr;
  if (bias >= 0) {
    b = kv_b_full_.data() + which * GD;
    tp_.comm().all_gather(params_.value(bias), b, GD / tp_.size());
  }
  return {w + group * D_ * C_, b != nullptr ? b + group * D_ : nullptr};
}

void Attention::kv_backward_weight(int weight, int bias, const float* d_out, const float* in) const {
  const int64_t GD_l = G_l_ * D_;
  if (kv_replicas_ == 1) {
    k_.linear_backward(nullptr, params_.grad(weight), bias >= 0 ? params_.grad(bias) : nullptr, d_out, in,
                       params_.value(weight), N_, C_, GD_l, layout_);
    return;
  }
  const int64_t GD = G_ * D_, group = tp_.rank() / kv_replicas_, slice = GD / tp_.size();
  float* dw = d_kv_w_full_.data();
  float* db = bias >= 0 ? d_kv_b_full_.data() : nullptr;
  k_.zero(dw, GD * C_);
  if (db != nullptr) k_.zero(db, GD);
  // Only the group's rows get this rank's share; the reduce-scatter sums the group's replicas.
  k_.linear_backward(nullptr, dw + group * D_ * C_, db != nullptr ? db + group * D_ : nullptr, d_out, in,
                     nullptr, N_, C_, D_, layout_);
  tp_.comm().reduce_scatter(dw, d_kv_w_local_.data(), slice * C_);
  k_.residual_forward(params_.grad(weight), params_.grad(weight), d_kv_w_local_.data(), slice * C_);
  if (db != nullptr) {
    tp_.comm().reduce_scatter(db, d_kv_b_local_.data(), slice);
    k_.residual_forward(params_.grad(bias), params_.grad(bias), d_kv_b_local_.data(), slice);
  }
}

// d_q and d_k hold the gradients of the normalised q and k on entry and of the raw projections'
// outputs on exit; d_normed (N, H_l·D) is scratch.
void Attention::qk_norm_backward(Saved& s, float* d_normed) const {
  k_.copy(d_normed, s.d_q.data(), N_ * H_l_ * D_);
  s.d_q.zero();
  q_norm_->backward(s.q_norm, s.d_q.data(), d_normed, s.q_raw.data(), N_ * H_l_);
  k_.copy(d_normed, s.d_k.data(), N_ * G_l_ * D_);
  s.d_k.zero();
  k_norm_->backward(s.k_norm, s.d_k.data(), d_normed, s.k_raw.data(), N_ * G_l_);
}

// The output projection's bias was added after the TP reduction to this rank's rows only: its
// gradient sums those rows of the gathered output gradient.
void Attention::backward_weight(Saved& s, const float* in) const {
  const int64_t HD = H_l_ * D_;
  if (proj_b_ >= 0)
    k_.bias_backward(params_.grad(proj_b_), s.d_out.data() + tp_.first_row(N_) * C_,
                     tp_.local_rows(N_), C_);
  k_.linear_backward(nullptr, params_.grad(proj_w_), nullptr, s.d_out.data(), proj_input(s),
                     params_.value(proj_w_), N_, HD, C_, layout_);
  if (fused_) {
    k_.linear_backward(nullptr, params_.grad(qkv_w_), params_.grad(qkv_b_), s.d_qkv.data(), in,
                       params_.value(qkv_w_), N_, C_, 3 * HD, layout_);
    return;
  }
  if (gated_)
    gated_q_backward_weight(s.d_q.data(), s.d_gate.data(), in);
  else
    k_.linear_backward(nullptr, params_.grad(q_w_), params_.grad(q_b_), s.d_q.data(), in,
                       params_.value(q_w_), N_, C_, HD, layout_);
  kv_backward_weight(k_w_, k_b_, s.d_k.data(), in);
  kv_backward_weight(v_w_, v_b_, s.d_v.data(), in);
}

// q (rows, H_l·D) = in (rows, C) · W_qᵀ and gate likewise, head h's rows of q_proj.weight being
// [q_h (D rows) | g_h (D rows)] from row 2·h·D.
void Attention::gated_q_forward(float* q, float* gate, const float* in, int64_t rows) const {
  const int64_t HD = H_l_ * D_;
  const float* w = params_.value(q_w_);
  for (int64_t h = 0; h < H_l_; ++h) {
    k_.gemm(false, true, rows, D_, C_, 1.0f, in, C_, w + 2 * h * D_ * C_, C_, 0.0f, q + h * D_, HD);
    k_.gemm(false, true, rows, D_, C_, 1.0f, in, C_, w + (2 * h + 1) * D_ * C_, C_, 0.0f, gate + h * D_, HD);
  }
}

// d_in (N, C) += d_q · W_q + d_gate · W_g.
void Attention::gated_q_backward_input(float* d_in, const float* d_q, const float* d_gate) const {
  const int64_t HD = H_l_ * D_;
  const float* w = params_.value(q_w_);
  for (int64_t h = 0; h < H_l_; ++h) {
    k_.gemm(false, false, N_, C_, D_, 1.0f, d_q + h * D_, HD, w + 2 * h * D_ * C_, C_, 1.0f, d_in, C_);
    k_.gemm(false, false, N_, C_, D_, 1.0f, d_gate + h * D_, HD, w + (2 * h + 1) * D_ * C_, C_, 1.0f, d_in, C_);
  }
}

// dW_q += d_qᵀ · in, dW_g += d_gateᵀ · in, into each head's two row blocks.
void Attention::gated_q_backward_weight(const float* d_q, const float* d_gate, const float* in) const {
  const int64_t HD = H_l_ * D_;
  float* dw = params_.grad(q_w_);
  for (int64_t h = 0; h < H_l_; ++h) {
    k_.gemm(true, false, D_, C_, N_, 1.0f, d_q + h * D_, HD, in, C_, 1.0f, dw + 2 * h * D_ * C_, C_);
    k_.gemm(true, false, D_, C_, N_, 1.0f, d_gate + h * D_, HD, in, C_, 1.0f, dw + (2 * h + 1) * D_ * C_, C_);
  }
}

std::vector<int> Attention::input_half_params() const {
  if (!q_norm_) return {};
  return {q_norm_->weight(), k_norm_->weight()};
}

std::vector<int> Attention::weight_half_params() const {
  std::vector<int> ids;
  for (int p : {qkv_w_, qkv_b_, q_w_, q_b_, k_w_, k_b_, v_w_, v_b_, proj_w_, proj_b_})
    if (p >= 0) ids.push_back(p);
  return ids;
}

}  // namespace tessel
