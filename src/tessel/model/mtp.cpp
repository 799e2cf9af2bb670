#include "tessel/model/mtp.h"

#include <fmt/format.h>

namespace tessel {

namespace {
// Depth d's (0-based) name of a module: Hugging Face's for the first, under mtp.layers.{d} after.
std::string module_name(int d, const char* module) {
  return d == 0 ? fmt::format("mtp.{}.weight", module) : fmt::format("mtp.layers.{}.{}.weight", d, module);
}
}  // namespace

MultiTokenPrediction::MultiTokenPrediction(const LayerContext& ctx, int word_embeddings, int lm_head,
                                           LayerRecompute recompute)
    : k_(ctx.k), params_(ctx.registry), tp_(ctx.tp), N_(ctx.rows()), N_l_(ctx.local_rows()), C_(ctx.cfg.hidden_size) {
  const Kernels& k = ctx.k;
  ParamRegistry& registry = ctx.registry;
  const ModelConfig& cfg = ctx.cfg;
  const NormKind kind = NormKind::RMSNorm;  // llama's (MTP needs --arch llama)
  depths_.resize(cfg.mtp_num_layers);
  for (int d = 0; d < cfg.mtp_num_layers; ++d) {
    Module& m = depths_[d];
    m.embedding.emplace(ctx, word_embeddings, cfg.num_layers + d);
    m.enorm.emplace(k, registry, model_norm(cfg, kind, module_name(d, "pre_fc_norm_embedding"), C_));
    m.hnorm.emplace(k, registry, model_norm(cfg, kind, module_name(d, "pre_fc_norm_hidden"), C_));
    m.fc = registry.add(module_name(d, "fc"), {C_, 2 * C_}, ParamInit::Normal, cfg.init_method_std, true);
    m.layer = std::make_unique<TransformerBlock>(ctx, cfg.num_layers + d, recompute);
    m.head.emplace(ctx, lm_head, module_name(d, "norm"));
  }
}

void MultiTokenPrediction::list_saved(Saved& s, SavedLists& lists) const {
  s.depths.resize(depths_.size());
  s.loss_sums.assign(depths_.size(), 0.0);
  for (size_t d = 0; d < depths_.size(); ++d) {
    const Module& m = depths_[d];
    Depth& a = s.depths[d];
    TensorList& kept = lists.kept;
    m.embedding->list_saved(a.embedding, kept);
    kept.add(a.emb, {N_l_, C_}, "MTP embedding of the shifted ids");
    m.enorm->list_saved(a.enorm, kept, N_l_, "MTP embedding norm");
    m.hnorm->list_saved(a.hnorm, kept, N_l_, "MTP hidden norm");
    kept.add(a.e, {N_l_, C_}, "MTP normed embedding (fc input)");
    kept.add(a.h, {N_l_, C_}, "MTP normed hidden state (fc input)");
    kept.add(a.m, {N_l_, C_}, "MTP fc output (layer input)");
    kept.add(a.d_m, {N_l_, C_}, "MTP fc output gradient");
    m.layer->list_saved(a.layer, lists);
    kept.add(a.x, {N_l_, C_}, "MTP layer output");
    m.head->list_saved(a.head, kept);
  }
}

const float* MultiTokenPrediction::input_rows(const Saved& s, const Head::Saved& main, int d) const {
  const Tensor& h = d == 0 ? main.out : s.depths[d - 1].head.out;  // (N, C) gathered
  return h.data() + tp_.first_row(N_) * C_;
}

float* MultiTokenPrediction::input_grad(Saved& s, Head::Saved& main, int d) const {
  return (d == 0 ? main.d_out : s.depths[d - 1].head.d_out).data();
}

// m (N_l, C) = e · W_eᵀ + h · W_hᵀ with fc's weight W = [W_e | W_h] (C, 2C): the product of
// cat(e, h) without building it.
void MultiTokenPrediction::forward(Saved& s, const Head::Saved& main, const MtpRows& rows,
                                   float grad_scale, const float* loss_scales,
                                   const PackedRows& packed, ChunkScratch& scratch) {
  for (int d = 0; d < depths(); ++d) {
    Module& m = depths_[d];
    Depth& a = s.depths[d];
    m.embedding->forward(a.embedding, a.emb.data(), rows.tokens + d * N_, packed, scratch);
    m.enorm->forward(a.enorm, a.e.data(), a.emb.data(), N_l_);
    m.hnorm->forward(a.hnorm, a.h.data(), input_rows(s, main, d), N_l_);
    const float* w = params_.value(m.fc);
    k_.gemm(false, true, N_l_, C_, C_, 1.0f, a.e.data(), C_, w, 2 * C_, 0.0f, a.m.data(), C_);
    k_.gemm(false, true, N_l_, C_, C_, 1.0f, a.h.data(), C_, w + C_, 2 * C_, 1.0f, a.m.data(), C_);
    m.layer->forward(a.layer, a.x.data(), a.m.data(), grad_scale, packed, scratch);
    s.loss_sums[d] = m.head->forward(a.head, a.x.data(), rows.targets + d * N_, loss_scales[d], scratch);
  }
}

// The last depth first: each depth's head gradient (its output h_k's, with what depth k + 1 added
// to it) back through mtp.norm, the layer, fc and the two norms, into h_{k−1}'s gradient and the
// embeddings'.
void MultiTokenPrediction::backward_input(Saved& s, Head::Saved& main, float grad_scale,
                                          const PackedRows& packed, float* recompute_out,
                                          ChunkScratch& scratch, const GradReady& ready) {
  for (int d = depths() - 1; d >= 0; --d) {
    Module& m = depths_[d];
    Depth& a = s.depths[d];
    float* dx = a.d_m.data();  // d(layer output), then d(m) in place
    k_.zero(dx, N_l_ * C_);
    m.head->backward_input(a.head, dx, a.x.data());
    if (m.layer->recompute().full)
      m.layer->forward(a.layer, recompute_out, a.m.data(), grad_scale, packed, scratch, true);
    m.layer->backward_input(a.layer, dx, a.m.data(), scratch, ready);
    // d(h), then d(e) (N_l, C) = d(m) · W_h, d(m) · W_e, one at a time in scratch.full; the
    // embedding's gradient in scratch.local_grad.
    const float* w = params_.value(m.fc);
    float* d_in = scratch.full.data();
    k_.gemm(false, false, N_l_, C_, C_, 1.0f, dx, C_, w + C_, 2 * C_, 0.0f, d_in, C_);
    m.hnorm->backward(a.hnorm, input_grad(s, main, d), d_in, input_rows(s, main, d), N_l_);
    k_.gemm(false, false, N_l_, C_, C_, 1.0f, dx, C_, w, 2 * C_, 0.0f, d_in, C_);
    float* d_emb = scratch.local_grad.data();
    k_.zero(d_emb, N_l_ * C_);
    m.enorm->backward(a.enorm, d_emb, d_in, a.emb.data(), N_l_);
    m.embedding->backward(a.embedding, d_emb, scratch);
    report_ready(ready, {m.head->norm().weight(), m.hnorm->weight(), m.enorm->weight()});
  }
}

void MultiTokenPrediction::lm_head_backward_weight(Saved& s) {
  for (int d = depths() - 1; d >= 0; --d) depths_[d].head->backward_weight(s.depths[d].head);
}

// dW_e += d(m)ᵀ · e, dW_h += d(m)ᵀ · h.
void MultiTokenPrediction::backward_weight(Saved& s, const GradReady& ready) {
  for (int d = depths() - 1; d >= 0; --d) {
    Module& m = depths_[d];
    Depth& a = s.depths[d];
    m.layer->backward_weight(a.layer, ready);
    float* dw = params_.grad(m.fc);
    k_.gemm(true, false, C_, C_, N_l_, 1.0f, a.d_m.data(), C_, a.e.data(), C_, 1.0f, dw, 2 * C_);
    k_.gemm(true, false, C_, C_, N_l_, 1.0f, a.d_m.data(), C_, a.h.data(), C_, 1.0f, dw + C_, 2 * C_);
    report_ready(ready, {m.fc});
  }
}

}  // namespace tessel
