#include "tessel/model/block.h"

#include <fmt/format.h>

#include <cmath>

namespace tessel {

namespace {

NormKind norm_kind(const ModelConfig& cfg) {
  return cfg.arch == Arch::GPT2 ? NormKind::LayerNorm : NormKind::RMSNorm;
}

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};

std::string norm_name(const ModelConfig& cfg, int layer, int which, const char* part) {
  if (cfg.arch == Arch::GPT2) return fmt::format("transformer.h.{}.ln_{}.{}", layer, which, part);
  return fmt::format("{}{}.{}", cfg.layer_prefix(layer),
                     which == 1 ? "input_layernorm" : "post_attention_layernorm", part);
}

// Norm `which` (1 before the mixer, 2 before the MLP) of `layer`.
Norm::Spec block_norm(const ModelConfig& cfg, int layer, int which) {
  return model_norm(cfg, norm_kind(cfg), norm_name(cfg, layer, which, "weight"), cfg.hidden_size,
                    norm_name(cfg, layer, which, "bias"));
}

// The mixer --linear-attention-freq picks for the layer.
Mixer make_mixer(const LayerContext& ctx, int layer) {
  if (ctx.cfg.is_linear_layer(layer)) return Mixer(std::in_place_type<GatedDeltaNet>, ctx, layer);
  return Mixer(std::in_place_type<Attention>, ctx, layer);
}

// The MLP --moe-layer-freq picks: an MoE layer on this rank's rows, or the dense MLP split over TP.
FeedForward make_ffn(const LayerContext& ctx, int layer, LayerRecompute recompute) {
  const ModelConfig& cfg = ctx.cfg;
  if (cfg.is_moe_layer(layer)) return FeedForward(std::in_place_type<MoeLayer>, ctx, layer, ctx.local_rows(), recompute);
  const TensorParallel& tp = ctx.tp;
  const Mlp::Split split = [&](int dim) {
    return ShardSpec{.dim = dim, .group = ShardGroup::TP, .index = tp.rank(), .count = tp.size()};
  };
  const bool gpt2 = cfg.arch == Arch::GPT2;
  return FeedForward(std::in_place_type<Mlp>, ctx.k, ctx.registry,
                     Mlp::Spec{.prefix = gpt2 ? fmt::format("transformer.h.{}.mlp.", layer)
                                              : cfg.layer_prefix(layer) + "mlp.",
                               .activation = !gpt2 ? Activation::SwiGlu : cfg.openai_gelu ? Activation::GeluTanh : Activation::Gelu,
                               .C = cfg.hidden_size,
                               .F = cfg.ffn_size(),
                               .F_l = cfg.ffn_size() / tp.size(),
                               .split = split,
                               .in_std = cfg.init_method_std,
                               .out_std = output_init_std(cfg)});
}
}  // namespace

// Parameters in Hugging Face order: norm 1, the mixer, norm 2, the MLP (or the MoE layer's).
TransformerBlock::TransformerBlock(const LayerContext& ctx, int layer, LayerRecompute recompute)
    : k_(ctx.k),
      tp_(ctx.tp),
      N_(ctx.rows()),
      N_l_(ctx.local_rows()),
      C_(ctx.cfg.hidden_size),
      norm1_(ctx.k, ctx.registry, block_norm(ctx.cfg, layer, 1)),
      mixer_(make_mixer(ctx, layer)),
      norm2_(ctx.k, ctx.registry, block_norm(ctx.cfg, layer, 2)),
      ffn_(make_ffn(ctx, layer, recompute)),
      recompute_(recompute),
      layer_(layer),
      hidden_dropout_(ctx.cfg.hidden_dropout),
      dropout_keys_(ctx.dropout_keys()) {}

// Under full recompute everything goes to the shared memory (the chunk keeps the layer's input);
// selectively, what the chosen modules recompute, and the output gradients when the weight
// gradients run inside backward_input.
void TransformerBlock::list_saved(Saved& s, SavedLists& lists) const {
  const LayerRecompute& r = recompute_;
  TensorList& norm_out = lists.pick(r.full || r.layernorm);
  norm1_.list_saved(s.norm1, norm_out, N_l_, "norm 1");
  norm_out.add(s.in1, {N_, C_}, "attention input (norm 1 output, gathered)");
  std::visit([&](const auto& m) {
    m.list_saved(s.mixer.emplace<typename std::remove_cvref_t<decltype(m)>::Saved>(), lists, r);
  }, mixer_);
  lists.pick(r.full).add(s.mid, {N_l_, C_}, "residual after attention");
  norm2_.list_saved(s.norm2, norm_out, N_l_, "norm 2");
  std::visit(Overloaded{
                 [&](const Mlp& mlp) {
                   norm_out.add(s.in2, {N_, C_}, "MLP input (norm 2 output, gathered)");
                   mlp.list_saved(s.ffn.emplace<Mlp::Saved>(), lists.pick(r.full || r.mlp),
                                  lists.pick(r.weights_in_input_pass()), N_, "MLP");
                 },
                 [&](const MoeLayer& moe) {
                   norm_out.add(s.in2, {N_l_, C_}, "MoE input (norm 2 output)");
                   moe.list_saved(s.ffn.emplace<MoeLayer::Saved>(), lists);
                 }},
             ffn_);
}

// Norm 2 on this rank's rows: gathered to all rows for the dense MLP's column-parallel entry; the
// MoE layer routes this rank's rows.
void TransformerBlock::norm2_forward(Saved& s, ChunkScratch& scratch) {
  if (moe() != nullptr) {
    norm2_.forward(s.norm2, s.in2.data(), s.mid.data(), N_l_);
    return;
  }
  float* in2 = tp_.sequence_parallel ? scratch.norm_out.data() : s.in2.data();
  norm2_.forward(s.norm2, in2, s.mid.data(), N_l_);
  tp_.gather_rows(in2, s.in2.data(), N_, C_);
}

void TransformerBlock::forward(Saved& s, float* out, const float* x, float grad_scale,
                               const PackedRows& packed, ChunkScratch& scratch, bool recomputing) {
  s.sample_ids = packed.sample_ids;
  const bool sp = tp_.sequence_parallel;
  float* branch = scratch.local.data();  // (N_l, C) a mixer or MLP output
  // The mixer: norm on this rank's rows, gathered to all rows for the column-parallel projections.
  float* in1 = sp ? scratch.norm_out.data() : s.in1.data();
  norm1_.forward(s.norm1, in1, x, N_l_);
  tp_.gather_rows(in1, s.in1.data(), N_, C_);
  with_mixer(s, [&](auto& m, auto& ms) { m.forward(ms, branch, s.in1.data(), scratch.full.data(), packed); });
  k_.dropout_add_forward(s.mid.data(), x, branch, N_l_, C_, dropout(s, DropoutKind::Mixer));
  norm2_forward(s, scratch);
  with_ffn(s, Overloaded{[&](Mlp& mlp, Mlp::Saved& f) {
                           mlp.forward(f, branch, s.in2.data(), N_, tp_, scratch.full.data());
                         },
                         [&](MoeLayer& moe, MoeLayer::Saved& f) {
                           if (recomputing) moe.recompute(f, branch, s.in2.data());
                           else moe.forward(f, branch, s.in2.data(), N_l_, grad_scale, packed.routing_sample_ids);
                         }});
  k_.dropout_add_forward(out, s.mid.data(), branch, N_l_, C_, dropout(s, DropoutKind::Mlp));
}

const float* TransformerBlock::branch_gradient(const Saved& s, DropoutKind kind, const float* dres,
                                               ChunkScratch& scratch) const {
  const DropoutSite drop = dropout(s, kind);
  if (!drop.active()) return dres;
  k_.zero(scratch.d_branch.data(), N_l_ * C_);
  k_.dropout_add_backward(scratch.d_branch.data(), dres, N_l_, C_, drop);
  return scratch.d_branch.data();
}

void TransformerBlock::list_decode_state(DecodeState& d, TensorList& list) const {
  std::visit([&](const auto& m) {
    m.list_decode_state(d.mixer.emplace<typename std::remove_cvref_t<decltype(m)>::DecodeState>(), list);
  }, mixer_);
}

// The forward's list on n rows of one process (no rows to gather), the mixer's decode step in
// place of its forward.
void TransformerBlock::decode(Saved& s, DecodeState& d, float* out, const float* x, int64_t start,
                              int64_t n, ChunkScratch& scratch) {
  const int64_t rows = n * C_;
  float* branch = scratch.local.data();  // (n, C) a mixer or MLP output
  norm1_.forward(s.norm1, s.in1.data(), x, n);
  with_mixer(s, [&](auto& m, auto& ms) {
    using State = typename std::remove_cvref_t<decltype(m)>::DecodeState;
    m.decode(ms, std::get<State>(d.mixer), branch, s.in1.data(), start, n);
  });
  k_.residual_forward(s.mid.data(), x, branch, rows);
  norm2_.forward(s.norm2, s.in2.data(), s.mid.data(), n);
  with_ffn(s, Overloaded{[&](Mlp& mlp, Mlp::Saved& f) {
                           mlp.forward(f, branch, s.in2.data(), n, tp_, scratch.full.data());
                         },
                         [&](MoeLayer& moe, MoeLayer::Saved& f) { moe.forward(f, branch, s.in2.data(), n, 0.0f); }});
  k_.residual_forward(out, s.mid.data(), branch, rows);
}

// The norms again from the kept input and residual, re-gathered under sequence parallel; the
// mixer's recomputed part (core attention from the kept q, k, v; Gated DeltaNet's gated norm); the
// MLP's hidden activations from its kept input; the MoE layer's recomputed parts. Each writes what
// the forward wrote, so the backward reads the same values.
void TransformerBlock::recompute_modules(Saved& s, const float* x, ChunkScratch& scratch) {
  const LayerRecompute& r = recompute_;
  if (r.layernorm) {
    float* in1 = tp_.sequence_parallel ? scratch.norm_out.data() : s.in1.data();
    norm1_.forward(s.norm1, in1, x, N_l_);
    tp_.gather_rows(in1, s.in1.data(), N_, C_);
    norm2_forward(s, scratch);
  }
  with_mixer(s, [&](auto& m, auto& ms) { m.recompute(ms, r); });
  with_ffn(s, Overloaded{[&](Mlp& mlp, Mlp::Saved& f) {
                           if (r.mlp) mlp.hidden_forward(f.rows(), s.in2.data(), N_);
                         },
                         [&](MoeLayer& moe, MoeLayer::Saved& f) {
                           moe.recompute(f, scratch.local.data(), s.in2.data());
                         }});
}

void TransformerBlock::backward_input(Saved& s, float* dres, const float* x,
                                      ChunkScratch& scratch, const GradReady& ready) {
  if (recompute_.any() && !recompute_.full) recompute_modules(s, x, scratch);
  float* d_full = scratch.full_grad.data();    // (N, C)
  float* d_local = scratch.local_grad.data();  // (N_l, C), a view of d_full without SP
  const float* d_mlp = branch_gradient(s, DropoutKind::Mlp, dres, scratch);
  with_ffn(s, Overloaded{[&](Mlp& mlp, Mlp::Saved& f) {  // on all rows, reduced over TP
                           k_.zero(d_full, N_ * C_);
                           mlp.backward_input(f, d_full, d_mlp, s.in2.data(), N_, tp_, scratch.d_hidden.data());
                           tp_.reduce_rows(d_full, d_local, N_, C_);
                         },
                         [&](MoeLayer& moe, MoeLayer::Saved& f) {  // on this rank's rows
                           k_.zero(d_local, N_l_ * C_);
                           moe.backward_input(f, d_local, d_mlp, s.in2.data());
                         }});
  norm2_.backward(s.norm2, dres, d_local, s.mid.data(), N_l_);

  k_.zero(d_full, N_ * C_);
  const float* d_mixer = branch_gradient(s, DropoutKind::Mixer, dres, scratch);
  with_mixer(s, [&](auto& m, auto& ms) { m.backward_input(ms, d_full, d_mixer, s.in1.data(), scratch); });
  tp_.reduce_rows(d_full, d_local, N_, C_);
  norm1_.backward(s.norm1, dres, d_local, x, N_l_);
  report_ready(ready, {norm1_.weight(), norm1_.bias(), norm2_.weight(), norm2_.bias()});
  std::visit([&](const auto& m) {
    for (int p : m.input_half_params()) report_ready(ready, {p});
  }, mixer_);
  if (recompute_.weights_in_input_pass()) weight_gradients(s, ready);
}

void TransformerBlock::backward_weight(Saved& s, const GradReady& ready) {
  if (!recompute_.weights_in_input_pass()) weight_gradients(s, ready);
}

// Last sub-layer first, as backward_input, so data parallelism's buckets (cut from the end of
// the parameters) fill in the same order: the MoE layer reports its own; the mixer's, then the
// dense MLP's.
void TransformerBlock::weight_gradients(Saved& s, const GradReady& ready) {
  with_ffn(s, Overloaded{[&](Mlp& mlp, Mlp::Saved& f) { mlp.backward_weight(f, s.in2.data(), N_, tp_); },
                         [&](MoeLayer& moe, MoeLayer::Saved& f) { moe.backward_weight(f, s.in2.data(), ready); }});
  with_mixer(s, [&](auto& m, auto& ms) {
    m.backward_weight(ms, s.in1.data());
    for (int p : m.weight_half_params()) report_ready(ready, {p});
  });
  if (const Mlp* mlp = std::get_if<Mlp>(&ffn_))
    for (int p : mlp->param_indices()) report_ready(ready, {p});
}

}  // namespace tessel
