#include "tessel/model/transformer.h"

#include "tessel/core/error.h"

namespace tessel {

int64_t ChunkActivations::bytes() const {
  int64_t n = allocated_bytes;
  for (const TransformerBlock::Saved& l : layers) n += l.moe.growing_bytes();
  return n;
}

TransformerChunk::TransformerChunk(const Kernels& k, const ModelConfig& cfg, ChunkSpec spec,
                                   int64_t micro_batch, TensorParallel tp, ParamRegistry& registry,
                                   ContextParallel cp, MoeGroups moe_groups)
    : k_(k), registry_(registry), cfg_(cfg), spec_(spec), tp_(tp), cp_(cp) {
  cfg_.validate();
  const int t = tp_.size();
  TESSEL_CHECK(cfg.num_attention_heads % t == 0 && cfg.query_groups() % t == 0 &&
                   cfg.ffn_size() % t == 0,
               "heads ({}), query groups ({}) and ffn ({}) must divide by the TP size {}",
               cfg.num_attention_heads, cfg.query_groups(), cfg.ffn_size(), t);
  TESSEL_CHECK(cfg.seq_length % (2 * cp_.size()) == 0 || cp_.size() == 1,
               "context parallel needs --seq-length {} divisible by 2 × CP = {}", cfg.seq_length,
               2 * cp_.size());
  B_ = micro_batch;
  T_ = cfg.seq_length / cp_.size();  // this CP rank's rows of every sequence
  N_ = B_ * T_;
  TESSEL_CHECK(!tp_.sequence_parallel || N_ % t == 0,
               "sequence parallel needs micro batch × sequence ({}) divisible by TP {}", N_, t);
  N_l_ = tp_.local_rows(N_);
  C_ = cfg.hidden_size;
  TESSEL_CHECK(cfg.moe.num_experts == 0 ||
                   (cfg.arch == Arch::Llama && (t == 1 || tp_.sequence_parallel)),
               "Mixture of Experts needs --arch llama, and sequence parallel with TP {}", t);
  moe_groups.tp = tp_;

  // (N) the global position of each row b·T_l + t: this CP rank's positions, every sequence.
  const std::vector<int32_t> local = cp_.local_positions(cfg.seq_length);
  std::vector<int32_t> rows;
  for (int b = 0; b < B_; ++b) rows.insert(rows.end(), local.begin(), local.end());
  positions_ = k_.zeros({N_}, DType::I32);
  k_.memory.from_host(positions_.ints(), rows.data(), N_ * 4);
  if (cfg_.arch == Arch::Llama) {
    rope_cos_ = k_.zeros({cfg.max_positions(), cfg.head_dim() / 2});
    rope_sin_ = k_.zeros({cfg.max_positions(), cfg.head_dim() / 2});
    k_.rope_tables(rope_cos_.data(), rope_sin_.data(), cfg.max_positions(), cfg.head_dim(),
                   cfg.rotary_base);
  }
  const bool sp = tp_.sequence_parallel;
  ChunkScratch& s = scratch_;
  s.full = k_.zeros({N_, C_});
  s.local = sp ? k_.zeros({N_l_, C_}) : s.full;
  s.norm_out = k_.zeros({N_l_, C_});
  if (sp) s.rows_full = k_.zeros({N_, C_});
  s.full_grad = k_.zeros({N_, C_});
  s.local_grad = sp ? k_.zeros({N_l_, C_}) : s.full_grad;
  s.d_heads = k_.zeros({N_, cfg.num_attention_heads / t * cfg.head_dim()});
  s.d_hidden = k_.zeros({N_, cfg.ffn_size() / t});
  d_resid_ = k_.zeros({N_l_, C_});

  // Parameters in Hugging Face order. A tied head on another stage keeps its own copy of the word
  // embeddings, declared first as the embedding's, synchronised as Megatron's embedding group.
  if (spec_.has_embedding) {
    embedding_.emplace(k_, registry, cfg_, tp_, N_, positions_);
  } else if (spec_.has_head && cfg_.tied_embeddings()) {
    tied_copy_ = Embedding::declare_word_embeddings(registry, cfg_, tp_);
  }
  for (int i = 0; i < spec_.num_layers; ++i)
    blocks_.push_back(std::make_unique<TransformerBlock>(k_, registry, cfg_, spec_.first_layer + i,
                                                         tp_, cp_, moe_groups, B_, T_, positions_,
                                                         rope_cos_, rope_sin_));
  if (spec_.has_head) {
    const int tied = !cfg_.tied_embeddings() ? -1
                     : embedding_            ? embedding_->word_embeddings()
                                             : tied_copy_;
    head_.emplace(k_, registry, cfg_, tp_, N_, tied);
  }
}

void TransformerChunk::bind(const ParamRegistry& registry) const {
  TESSEL_CHECK(&registry == &registry_ && registry.finalized(),
               "model chunk: bind() needs the finalized registry the chunk declared into");
}

RouterTotals TransformerChunk::take_router_totals() {
  RouterTotals totals;
  for (auto& b : blocks_)
    if (MoeLayer* moe = b->moe()) totals.add(moe->take_router_totals());
  return totals;
}

int64_t TransformerChunk::scratch_bytes() const {
  int64_t n = positions_.bytes() + rope_cos_.bytes() + rope_sin_.bytes() + scratch_.bytes() +
              d_resid_.bytes();
  if (head_) n += head_->scratch_bytes();
  for (const auto& b : blocks_) n += b->scratch_bytes();
  return n;
}

ChunkActivations TransformerChunk::make_activations() const {
  ChunkActivations a;
  a.resid.resize(spec_.num_layers + 1);
  a.layers.resize(spec_.num_layers);
  SavedBuffers buffers;
  for (Tensor& r : a.resid) buffers.add(r, {N_l_, C_});
  if (embedding_) embedding_->list_saved(a.embedding, buffers);
  for (int i = 0; i < spec_.num_layers; ++i) blocks_[i]->list_saved(a.layers[i], buffers);
  if (head_) head_->list_saved(a.head, buffers);
  buffers.allocate(k_);
  a.allocated_bytes = buffers.bytes();
  return a;
}

double TransformerChunk::forward(ChunkActivations& acts, const int32_t* tokens, const float* input,
                                 const int32_t* targets, float grad_scale,
                                 const PackedRows& packed) {
  if (embedding_) {
    embedding_->forward(acts.embedding, acts.resid[0].data(), tokens, packed, scratch_);
  } else {
    k_.copy(acts.resid[0].data(), input, N_l_ * C_);
  }
  for (int i = 0; i < spec_.num_layers; ++i)
    blocks_[i]->forward(acts.layers[i], acts.resid[i + 1].data(), acts.resid[i].data(), grad_scale,
                        packed, scratch_);
  acts.loss_sum =
      head_ ? head_->forward(acts.head, acts.resid.back().data(), targets, grad_scale, scratch_)
            : 0.0;
  return acts.loss_sum;
}

void TransformerChunk::backward(ChunkActivations& acts, const float* d_output, float* d_input,
                                const GradReady& grad_ready) {
  backward_input(acts, d_output, d_input, grad_ready);
  backward_weight(acts, grad_ready);
}

// dres: the gradient of the residual stream, updated in place from the chunk's output back to its
// input; it ends as d(input), in the caller's buffer when there is one.
void TransformerChunk::backward_input(ChunkActivations& acts, const float* d_output,
                                      float* d_input, const GradReady& grad_ready) {
  float* dres = d_input != nullptr ? d_input : d_resid_.data();
  if (head_) {
    k_.zero(dres, N_l_ * C_);
    head_->backward_input(acts.head, dres, acts.resid.back().data());
    // A tied head's weight is the embedding's: final only after the embedding's backward (or,
    // for a last stage's copy, after the embedding group's sum).
    const bool tied = cfg_.tied_embeddings();
    report_ready(grad_ready, {head_->norm().weight(), head_->norm().bias(),
                              tied ? -1 : head_->lm_head()});
  } else {
    k_.copy(dres, d_output, N_l_ * C_);
  }
  for (int i = spec_.num_layers - 1; i >= 0; --i)
    blocks_[i]->backward_input(acts.layers[i], dres, acts.resid[i].data(), scratch_, grad_ready);
  if (embedding_) {
    embedding_->backward(acts.embedding, dres, scratch_);
    report_ready(grad_ready, {embedding_->word_embeddings(), embedding_->position_embeddings()});
  }
}

// Last layer first, as backward_input, so data parallelism's buckets (cut from the end of the
// parameters) fill in the same order.
void TransformerChunk::backward_weight(ChunkActivations& acts, const GradReady& grad_ready) {
  for (int i = spec_.num_layers - 1; i >= 0; --i)
    blocks_[i]->backward_weight(acts.layers[i], grad_ready);
}

}  // namespace tessel
