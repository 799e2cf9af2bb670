#include "tessel/model/head.h"

#include <algorithm>

#include "tessel/core/error.h"
#include "tessel/model/embedding.h"
#include "tessel/model/param_groups.h"

namespace tessel {

Head::Head(const LayerContext& ctx, int tied_embedding, const std::string& mtp_norm)
    : k_(ctx.k),
      params_(ctx.registry),
      tp_(ctx.tp),
      norm_(ctx.k, ctx.registry,
            model_norm(ctx.cfg, ctx.cfg.arch == Arch::GPT2 ? NormKind::LayerNorm : NormKind::RMSNorm,
                       !mtp_norm.empty()            ? mtp_norm
                       : ctx.cfg.arch == Arch::GPT2 ? "transformer.ln_f.weight"
                                                    : "model.norm.weight",
                       ctx.cfg.hidden_size, "transformer.ln_f.bias")),
      N_(ctx.rows()),
      C_(ctx.cfg.hidden_size),
      vocab_size_(ctx.cfg.vocab_size),
      decoding_(ctx.decoding) {
  const ModelConfig& cfg = ctx.cfg;
  const TensorParallel& tp = ctx.tp;
  const int64_t N = N_;
  ParamRegistry& registry = ctx.registry;
  TensorList& scratch = ctx.buffers.scratch;
  V_l_ = cfg.padded_vocab(tp.size()) / tp.size();
  vocab_start_ = tp.rank() * V_l_;
  V_valid_ = std::clamp<int64_t>(cfg.vocab_size - vocab_start_, 0, V_l_);
  const ShardSpec vocab{.dim = 0, .group = ShardGroup::TP, .index = tp.rank(), .count = tp.size(),
                        .padded_size = cfg.padded_vocab(tp.size())};
  lm_head_ = tied_embedding >= 0 ? tied_embedding
                                 : registry.add(kOutputLayerName, {cfg.vocab_size, C_},
                                                ParamInit::Normal, cfg.init_method_std, true, vocab);
  if (mtp_norm.empty()) scratch.add(logits_, {decoding_ ? 1 : N, V_l_}, "logits (without gradients)");
  scratch.add(loss_stats_, {4, N}, "cross-entropy statistics");
  scratch.add(lse_, {N}, "cross-entropy log-sum-exp");
}

void Head::list_saved(Saved& s, TensorList& buffers) const {
  const int64_t N_l = tp_.local_rows(N_);
  norm_.list_saved(s.norm, buffers, N_l, "final norm");
  buffers.add(s.out, {N_, C_}, "final norm output (gathered)");
  buffers.add(s.d_out, {N_l, C_}, "final norm output gradient");
  if (!decoding_) buffers.add(s.d_logits, {N_, V_l_}, "logits' gradient, for the head's weight gradient");
}

double Head::forward(Saved& s, const float* x_local, const int32_t* targets, float grad_scale,
                     ChunkScratch& scratch) {
  TESSEL_CHECK(!decoding_, "head forward: this model is built for decoding alone (one row of logits)");
  const int64_t N_l = tp_.local_rows(N_);
  float* out_local = tp_.sequence_parallel ? scratch.norm_out.data() : s.out.data();
  norm_.forward(s.norm, out_local, x_local, N_l);
  tp_.gather_rows(out_local, s.out.data(), N_, C_);
  // logits (N, V_l) = out (N, C) · Wᵀ with W (V_l, C): the tied embedding or lm_head.weight;
  // turned into their gradient in place when there is one. The table's GEMM, not its linear
  // layer: under --fp8-format only the transformer layers' linear layers run in FP8, Megatron's
  // output layer not being a Transformer Engine layer.
  const bool gradients = targets != nullptr && grad_scale > 0;
  float* logits = gradients ? s.d_logits.data() : logits_.data();
  linear_forward_products(k_.gemm, logits, s.out.data(), params_.value(lm_head_), N_, C_, V_l_,
                    WeightLayout::OutIn);
  if (targets == nullptr) return 0.0;
  check_token_ids(k_, targets, N_, static_cast<int32_t>(vocab_size_), "target", -1);
  const double loss_sum = vocab_parallel_cross_entropy(tp_, lse_.data(), loss_stats_.data(), logits,
                                                       targets, vocab_start_, N_, V_l_, V_valid_);
  if (gradients) {
    k_.cross_entropy_backward(logits, logits, lse_.data(), targets, vocab_start_, grad_scale, N_, V_l_,
                              V_valid_);
    float* d_full = scratch.full_grad.data();  // (N, C)
    k_.zero(d_full, N_ * C_);
    linear_backward_products(k_.gemm, d_full, nullptr, logits, s.out.data(), params_.value(lm_head_), N_, C_,
                       V_l_, WeightLayout::OutIn);
    tp_.reduce_rows(d_full, scratch.local_grad.data(), N_, C_);
    k_.copy(s.d_out.data(), scratch.local_grad.data(), N_l * C_);
  }
  return loss_sum;
}

void Head::decode(Saved& s, const float* x, int64_t n) {
  TESSEL_CHECK(tp_.size() == 1 && n >= 1 && n <= N_, "head decode: one process, {} rows within {}", n, N_);
  // The next token is drawn from the last row's logits alone: one row through the norm and the
  // LM head keeps generation's logits at one vocabulary's size, whatever the context.
  norm_.forward(s.norm, s.out.data(), x + (n - 1) * C_, 1);
  linear_forward_products(k_.gemm, logits_.data(), s.out.data(), params_.value(lm_head_), 1, C_, V_l_,
                    WeightLayout::OutIn);
}

void Head::backward_weight(const Saved& s) const {
  linear_backward_products(k_.gemm, nullptr, params_.grad(lm_head_), s.d_logits.data(), s.out.data(),
                     params_.value(lm_head_), N_, C_, V_l_, WeightLayout::OutIn);
}

void Head::backward_input(const Saved& s, float* dx, const float* x_local) const {
  norm_.backward(s.norm, dx, s.d_out.data(), x_local, tp_.local_rows(N_));
}

}  // namespace tessel
