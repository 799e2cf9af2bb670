#include "tessel/model/embedding.h"

#include <algorithm>

#include "tessel/core/error.h"

namespace tessel {

void check_token_ids(const Kernels& k, const int32_t* ids, int64_t n, int32_t vocab,
                     const char* what, int32_t lowest) {
  const int64_t bad = k.find_out_of_range(ids, n, lowest, vocab);
  if (bad < 0) return;
  int32_t id = 0;
  k.memory.to_host(&id, ids + bad, 4);
  fail("{} id {} is outside the vocabulary (size {})", what, id, vocab);
}

std::string Embedding::word_embeddings_name(const ModelConfig& cfg) {
  return cfg.arch == Arch::GPT2 ? "transformer.wte.weight" : "model.embed_tokens.weight";
}

int Embedding::declare_word_embeddings(ParamRegistry& registry, const ModelConfig& cfg,
                                       const TensorParallel& tp) {
  const ShardSpec vocab{.dim = 0, .group = ShardGroup::TP, .index = tp.rank(), .count = tp.size(),
                        .padded_size = cfg.padded_vocab(tp.size())};
  return registry.add(word_embeddings_name(cfg), {cfg.vocab_size, cfg.hidden_size}, ParamInit::Normal,
                      cfg.init_method_std, true, vocab);
}

Embedding::Embedding(const LayerContext& ctx, int word_embeddings, int layer)
    : k_(ctx.k),
      params_(ctx.registry),
      tp_(ctx.tp),
      N_(ctx.rows()),
      C_(ctx.cfg.hidden_size),
      vocab_size_(ctx.cfg.vocab_size),
      positions_(ctx.positions),
      dropout_(ctx.cfg.hidden_dropout),
      dropout_site_(dropout_site(layer, DropoutKind::Embedding)),
      dropout_keys_(ctx.dropout_keys()) {
  const ModelConfig& cfg = ctx.cfg;
  const TensorParallel& tp = ctx.tp;
  ParamRegistry& registry = ctx.registry;
  const int64_t V_l = cfg.padded_vocab(tp.size()) / tp.size();
  vocab_start_ = tp.rank() * V_l;
  V_valid_ = std::clamp<int64_t>(cfg.vocab_size - vocab_start_, 0, V_l);
  if (word_embeddings >= 0) {
    wte_ = word_embeddings;
    return;
  }
  wte_ = declare_word_embeddings(registry, cfg, tp);
  if (cfg.arch == Arch::GPT2)
    wpe_ = registry.add("transformer.wpe.weight", {cfg.max_positions(), C_}, ParamInit::Normal,
                        cfg.init_method_std, true);
}

void Embedding::list_saved(Saved& s, TensorList& buffers) const {
  buffers.add(s.vocab_ids, {N_}, "token ids in this vocabulary shard", DType::I32);
}

void Embedding::forward(Saved& s, float* out_local, const int32_t* tokens,
                        const PackedRows& packed, ChunkScratch& scratch) const {
  s.position_ids = packed.position_ids != nullptr ? packed.position_ids : positions_.ints();
  s.sample_ids = packed.sample_ids;
  check_token_ids(k_, tokens, N_, static_cast<int32_t>(vocab_size_), "token", 0);
  k_.embedding_shard_ids(s.vocab_ids.ints(), tokens, N_, vocab_start_, V_valid_);
  float* full = scratch.full_grad.data();  // (N, C) this shard's rows, zeros for the others
  k_.embedding_forward(full, s.vocab_ids.ints(), nullptr, params_.value(wte_), nullptr, N_, C_);
  tp_.reduce_rows(full, out_local, N_, C_);
  const int64_t rows = tp_.local_rows(N_);
  if (wpe_ >= 0) {
    const int32_t* pos = s.position_ids + tp_.first_row(N_);
    float* wpe_rows = scratch.norm_out.data();  // (N_l, C)
    k_.embedding_forward(wpe_rows, pos, nullptr, params_.value(wpe_), nullptr, rows, C_);
    k_.residual_forward(out_local, out_local, wpe_rows, rows * C_);
  }
  const DropoutSite drop = dropout_keys_.rows(dropout_, dropout_site_, s.sample_ids);
  if (drop.active()) k_.dropout_add_forward(out_local, nullptr, out_local, rows, C_, drop);
}

void Embedding::decode(Saved& s, float* out, const int32_t* tokens, int64_t start, int64_t n) const {
  TESSEL_CHECK(tp_.size() == 1 && start + n <= N_, "embedding decode: one process, {} + {} positions within {}",
               start, n, N_);
  check_token_ids(k_, tokens, n, static_cast<int32_t>(vocab_size_), "token", 0);
  k_.embedding_shard_ids(s.vocab_ids.ints(), tokens, n, vocab_start_, V_valid_);
  k_.embedding_forward(out, s.vocab_ids.ints(), wpe_ >= 0 ? positions_.ints() + start : nullptr,
                       params_.value(wte_), params_.value(wpe_), n, C_);
}

// The word embeddings' gradient is a scatter-add of the output gradient itself (gathered to all
// rows under sequence parallel).
void Embedding::backward(const Saved& s, const float* d_out_local, ChunkScratch& scratch) const {
  const DropoutSite drop = dropout_keys_.rows(dropout_, dropout_site_, s.sample_ids);
  if (drop.active()) {  // the gradient of the embeddings before dropout
    const int64_t rows = tp_.local_rows(N_);
    k_.zero(scratch.d_branch.data(), rows * C_);
    k_.dropout_add_backward(scratch.d_branch.data(), d_out_local, rows, C_, drop);
    d_out_local = scratch.d_branch.data();
  }
  if (wpe_ >= 0) {
    const int32_t* pos = s.position_ids + tp_.first_row(N_);
    k_.embedding_backward(params_.grad(wpe_), nullptr, d_out_local, pos, nullptr,
                          tp_.local_rows(N_), C_);
  }
  const float* full = d_out_local;
  if (tp_.sequence_parallel) {
    tp_.gather_rows(d_out_local, scratch.rows_full.data(), N_, C_);
    full = scratch.rows_full.data();
  }
  k_.embedding_backward(params_.grad(wte_), nullptr, full, s.vocab_ids.ints(), nullptr, N_, C_);
}

}  // namespace tessel
