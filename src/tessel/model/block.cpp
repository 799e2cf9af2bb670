#include "tessel/model/block.h"

#include <fmt/format.h>

#include <cmath>

namespace tessel {

namespace {

NormKind norm_kind(const ModelConfig& cfg) {
  return cfg.arch == Arch::GPT2 ? NormKind::LayerNorm : NormKind::RMSNorm;
}

std::string norm_name(const ModelConfig& cfg, int layer, int which, const char* part) {
  if (cfg.arch == Arch::GPT2) return fmt::format("transformer.h.{}.ln_{}.{}", layer, which, part);
  return fmt::format("{}{}.{}", cfg.layer_prefix(layer),
                     which == 1 ? "input_layernorm" : "post_attention_layernorm", part);
}
}  // namespace

// Parameters in Hugging Face order: norm 1, attention, norm 2, MLP (or the MoE layer's).
TransformerBlock::TransformerBlock(const LayerContext& ctx, int layer, LayerRecompute recompute)
    : k_(ctx.k),
      tp_(ctx.tp),
      N_(ctx.rows()),
      N_l_(ctx.local_rows()),
      C_(ctx.cfg.hidden_size),
      norm1_(ctx.k, ctx.registry, norm_kind(ctx.cfg), norm_name(ctx.cfg, layer, 1, "weight"),
             norm_name(ctx.cfg, layer, 1, "bias"), ctx.cfg.hidden_size, ctx.cfg.norm_epsilon, ctx.cfg.layernorm_1p),
      attention_(ctx.cfg.is_linear_layer(layer) ? std::nullopt
                                                : std::optional<Attention>(std::in_place, ctx, layer)),
      gdn_(ctx.cfg.is_linear_layer(layer) ? std::optional<GatedDeltaNet>(std::in_place, ctx, layer)
                                          : std::nullopt),
      norm2_(ctx.k, ctx.registry, norm_kind(ctx.cfg), norm_name(ctx.cfg, layer, 2, "weight"),
             norm_name(ctx.cfg, layer, 2, "bias"), ctx.cfg.hidden_size, ctx.cfg.norm_epsilon, ctx.cfg.layernorm_1p),
      recompute_(recompute) {
  const ModelConfig& cfg = ctx.cfg;
  const Kernels& k = ctx.k;
  ParamRegistry& registry = ctx.registry;
  const TensorParallel& tp = ctx.tp;
  if (cfg.is_moe_layer(layer)) {
    moe_ = std::make_unique<MoeLayer>(ctx, layer, N_l_, recompute);
    return;
  }
  const Mlp::Split split = [&](int dim) {
    return ShardSpec{.dim = dim, .group = ShardGroup::TP, .index = tp.rank(), .count = tp.size()};
  };
  const bool gpt2 = cfg.arch == Arch::GPT2;
  mlp_.emplace(k, registry,
               gpt2 ? fmt::format("transformer.h.{}.mlp.", layer) : cfg.layer_prefix(layer) + "mlp.",
               gpt2 ? Activation::Gelu : Activation::SwiGlu, cfg.hidden_size, cfg.ffn_size(),
               cfg.ffn_size() / tp.size(), split, output_init_std(cfg.num_layers));
}

// Under full recompute everything goes to the shared memory (the chunk keeps the layer's input);
// selectively, what the chosen modules recompute, and the output gradients when the weight
// gradients run inside backward_input.
void TransformerBlock::list_saved(Saved& s, SavedLists& lists) const {
  const LayerRecompute& r = recompute_;
  TensorList& norm_out = lists.pick(r.full || r.layernorm);
  norm1_.list_saved(s.norm1, norm_out, N_l_, "norm 1");
  norm_out.add(s.in1, {N_, C_}, "attention input (norm 1 output, gathered)");
  if (attention_) attention_->list_saved(s.attention, lists, r);
  else gdn_->list_saved(s.gdn, lists, r);
  lists.pick(r.full).add(s.mid, {N_l_, C_}, "residual after attention");
  norm2_.list_saved(s.norm2, norm_out, N_l_, "norm 2");
  if (moe_) {
    norm_out.add(s.in2, {N_l_, C_}, "MoE input (norm 2 output)");
    moe_->list_saved(s.moe, lists);
  } else {
    norm_out.add(s.in2, {N_, C_}, "MLP input (norm 2 output, gathered)");
    mlp_->list_saved(s.mlp, lists.pick(r.full || r.mlp), lists.pick(r.weights_in_input_pass()), N_, "MLP");
  }
}

void TransformerBlock::forward(Saved& s, float* out, const float* x, float grad_scale,
                               const PackedRows& packed, ChunkScratch& scratch, bool recomputing) {
  const bool sp = tp_.sequence_parallel;
  const int64_t n = N_l_ * C_;
  float* branch = scratch.local.data();  // (N_l, C) an attention or MLP output
  // Attention: norm on this rank's rows, gathered to all rows for the column-parallel q, k, v.
  float* in1 = sp ? scratch.norm_out.data() : s.in1.data();
  norm1_.forward(s.norm1, in1, x, N_l_);
  tp_.gather_rows(in1, s.in1.data(), N_, C_);
  if (attention_) attention_->forward(s.attention, branch, s.in1.data(), scratch.full.data(), packed);
  else gdn_->forward(s.gdn, branch, s.in1.data(), scratch.full.data(), packed);
  k_.residual_forward(s.mid.data(), x, branch, n);
  if (moe_) {  // on this rank's rows
    norm2_.forward(s.norm2, s.in2.data(), s.mid.data(), N_l_);
    if (recomputing) moe_->recompute(s.moe, branch, s.in2.data());
    else moe_->forward(s.moe, branch, s.in2.data(), N_l_, grad_scale);
    k_.residual_forward(out, s.mid.data(), branch, n);
    return;
  }
  float* in2 = sp ? scratch.norm_out.data() : s.in2.data();
  norm2_.forward(s.norm2, in2, s.mid.data(), N_l_);
  tp_.gather_rows(in2, s.in2.data(), N_, C_);
  mlp_->forward(s.mlp, branch, s.in2.data(), N_, tp_, scratch.full.data());
  k_.residual_forward(out, s.mid.data(), branch, n);
}

void TransformerBlock::list_decode_state(DecodeState& d, TensorList& list) const {
  if (attention_) attention_->list_kv_cache(d.attention, list);
  else gdn_->list_recurrent_state(d.gdn, list);
}

// The forward's list on n rows of one process (no rows to gather), the mixer's decode step in
// place of its forward.
void TransformerBlock::decode(Saved& s, DecodeState& d, float* out, const float* x, int64_t start,
                              int64_t n, ChunkScratch& scratch) {
  const int64_t rows = n * C_;
  float* branch = scratch.local.data();  // (n, C) an attention or MLP output
  norm1_.forward(s.norm1, s.in1.data(), x, n);
  if (attention_) attention_->decode(s.attention, d.attention, branch, s.in1.data(), start, n);
  else gdn_->decode(s.gdn, d.gdn, branch, s.in1.data(), n);
  k_.residual_forward(s.mid.data(), x, branch, rows);
  norm2_.forward(s.norm2, s.in2.data(), s.mid.data(), n);
  if (moe_) moe_->forward(s.moe, branch, s.in2.data(), n, 0.0f);
  else mlp_->forward(s.mlp, branch, s.in2.data(), n, tp_, scratch.full.data());
  k_.residual_forward(out, s.mid.data(), branch, rows);
}

// The norms again from the kept input and residual, re-gathered under sequence parallel; the
// core attention from the kept q, k, v; the MLP's hidden activations from its kept input; the
// MoE layer's recomputed parts. Each writes what the forward wrote, so the backward reads the
// same values.
void TransformerBlock::recompute_modules(Saved& s, const float* x, ChunkScratch& scratch) {
  const LayerRecompute& r = recompute_;
  const bool sp = tp_.sequence_parallel;
  if (r.layernorm) {
    float* in1 = sp ? scratch.norm_out.data() : s.in1.data();
    norm1_.forward(s.norm1, in1, x, N_l_);
    tp_.gather_rows(in1, s.in1.data(), N_, C_);
    float* in2 = sp && !moe_ ? scratch.norm_out.data() : s.in2.data();
    norm2_.forward(s.norm2, in2, s.mid.data(), N_l_);
    if (!moe_) tp_.gather_rows(in2, s.in2.data(), N_, C_);
  }
  if (r.core_attn && attention_) attention_->core_forward(s.attention);
  if (r.gdn_norm_out && gdn_) gdn_->norm_out_forward(s.gdn);
  if (moe_) moe_->recompute(s.moe, scratch.local.data(), s.in2.data());
  else if (r.mlp) mlp_->hidden_forward(s.mlp.rows(), s.in2.data(), N_);
}

void TransformerBlock::backward_input(Saved& s, float* dres, const float* x,
                                      ChunkScratch& scratch, const GradReady& ready) {
  if (recompute_.any() && !recompute_.full) recompute_modules(s, x, scratch);
  float* d_full = scratch.full_grad.data();    // (N, C)
  float* d_local = scratch.local_grad.data();  // (N_l, C), a view of d_full without SP
  if (moe_) {
    k_.zero(d_local, N_l_ * C_);
    moe_->backward_input(s.moe, d_local, dres, s.in2.data());
  } else {
    k_.zero(d_full, N_ * C_);
    mlp_->backward_input(s.mlp, d_full, dres, s.in2.data(), N_, tp_, scratch.d_hidden.data());
    tp_.reduce_rows(d_full, d_local, N_, C_);
  }
  norm2_.backward(s.norm2, dres, d_local, s.mid.data(), N_l_);

  k_.zero(d_full, N_ * C_);
  if (attention_)
    attention_->backward_input(s.attention, d_full, dres, s.in1.data(), scratch.d_heads.data(),
                               scratch.d_attn.data());
  else
    gdn_->backward_input(s.gdn, d_full, dres, s.in1.data());
  tp_.reduce_rows(d_full, d_local, N_, C_);
  norm1_.backward(s.norm1, dres, d_local, x, N_l_);
  report_ready(ready, {norm1_.weight(), norm1_.bias(), norm2_.weight(), norm2_.bias()});
  for (int p : attention_ ? attention_->input_half_params() : gdn_->input_half_params()) report_ready(ready, {p});
  if (recompute_.weights_in_input_pass()) weight_gradients(s, ready);
}

void TransformerBlock::backward_weight(Saved& s, const GradReady& ready) {
  if (!recompute_.weights_in_input_pass()) weight_gradients(s, ready);
}

// Last sub-layer first, as backward_input, so data parallelism's buckets (cut from the end of
// the parameters) fill in the same order.
void TransformerBlock::weight_gradients(Saved& s, const GradReady& ready) {
  if (moe_) {
    moe_->backward_weight(s.moe, s.in2.data(), ready);
  } else {
    mlp_->backward_weight(s.mlp, s.in2.data(), N_, tp_);
  }
  if (attention_) attention_->backward_weight(s.attention, s.in1.data());
  else gdn_->backward_weight(s.gdn, s.in1.data());
  for (int p : attention_ ? attention_->weight_half_params() : gdn_->weight_half_params())
    report_ready(ready, {p});
  if (mlp_)
    for (int p : mlp_->param_indices()) report_ready(ready, {p});
}

}  // namespace tessel
