#include "tessel/model/transformer.h"

#include <fmt/format.h>

#include <algorithm>

#include "tessel/core/error.h"

namespace tessel {

int64_t ChunkActivations::bytes() const {
  int64_t n = allocated_bytes;
  for (const TransformerBlock::Saved& l : layers) n += l.growing_bytes();
  for (const MultiTokenPrediction::Depth& d : mtp.depths) n += d.layer.growing_bytes();
  return n;
}

TransformerChunk::TransformerChunk(const Kernels& k, ParamRegistry& registry, const ModelConfig& cfg,
                                   const ChunkBuild& build, const ChunkGroups& groups)
    : TransformerChunk(k, registry, cfg, build, groups, true) {}

// Every tensor is declared first and allocated (or, declare-only, not) at the end, in one
// allocation per list: the tables the layers copy before they are built, then the scratch and
// the shared recomputed activations once every layer has declared its own.
TransformerChunk::TransformerChunk(const Kernels& k, ParamRegistry& registry, const ModelConfig& cfg,
                                   const ChunkBuild& build, const ChunkGroups& groups, bool allocate)
    : k_(k), registry_(registry), cfg_(cfg), spec_(build.spec), tp_(groups.tp), cp_(groups.cp) {
  cfg_.validate();
  check_split(build.micro_batch);
  B_ = build.micro_batch;
  T_ = cfg.seq_length / cp_.size();  // this CP rank's rows of every sequence
  N_ = B_ * T_;
  N_l_ = tp_.local_rows(N_);
  C_ = cfg.hidden_size;

  TensorList tables, scratch, shared;
  declare_tables(tables, allocate);
  declare_scratch(scratch);
  const LayerContext ctx{.k = k_, .registry = registry, .cfg = cfg_, .tp = tp_, .cp = cp_, .moe = groups.moe,
                         .B = B_, .T_l = T_, .positions = positions_, .rope_cos = rope_cos_,
                         .rope_sin = rope_sin_, .buffers = LayerBuffers{scratch, shared}, .seed = build.seed,
                         .decoding = build.decoding};
  declare_embeddings(ctx);
  bool full_recompute = build_layers(ctx, build.recompute);
  if (spec_.has_head) full_recompute |= build_head(ctx, build.recompute);
  tensors_.slot = declare_recompute_memory(shared, full_recompute);
  if (allocate) {
    scratch.allocate(k_);
    shared.allocate(k_);
    if (!tp_.sequence_parallel) {  // the reduced rows are all the rows
      scratch_.local = scratch_.full;
      scratch_.local_grad = scratch_.full_grad;
    }
  }
  tensors_.shared = shared.declared();
  tensors_.scratch = tables.declared();
  tensors_.scratch.insert(tensors_.scratch.end(), scratch.declared().begin(), scratch.declared().end());
}

void TransformerChunk::check_split(int64_t micro_batch) const {
  const ModelConfig& cfg = cfg_;
  const int t = tp_.size();
  const int kv_groups = cfg.query_groups();  // fewer than TP ranks: replicated (model/attention.h)
  TESSEL_CHECK(cfg.num_attention_heads % t == 0 && (kv_groups >= t ? kv_groups % t == 0 : t % kv_groups == 0) &&
                   cfg.ffn_size() % t == 0,
               "heads ({}), query groups ({}) and ffn ({}) must divide by the TP size {} (or it by the groups)",
               cfg.num_attention_heads, cfg.query_groups(), cfg.ffn_size(), t);
  TESSEL_CHECK(cfg.seq_length % (2 * cp_.size()) == 0 || cp_.size() == 1,
               "context parallel needs --seq-length {} divisible by 2 × CP = {}", cfg.seq_length,
               2 * cp_.size());
  const int64_t rows = micro_batch * (cfg.seq_length / cp_.size());
  TESSEL_CHECK(!tp_.sequence_parallel || rows % t == 0,
               "sequence parallel needs micro batch × sequence ({}) divisible by TP {}", rows, t);
  TESSEL_CHECK(cfg.moe.num_experts == 0 || (cfg.arch == Arch::Llama && (t == 1 || tp_.sequence_parallel)),
               "Mixture of Experts needs --arch llama, and sequence parallel with TP {}", t);
}

// (N) the global position of each row b·T_l + t: this CP rank's positions, every sequence; llama's
// RoPE tables.
void TransformerChunk::declare_tables(TensorList& tables, bool allocate) {
  const ModelConfig& cfg = cfg_;
  tables.set_part("chunk");
  tables.add(positions_, {N_}, "row positions", DType::I32);
  const bool llama = cfg.arch == Arch::Llama;
  if (llama) {
    tables.add(rope_cos_, {cfg.max_positions(), cfg.rotary_dim() / 2}, "RoPE cosines");
    tables.add(rope_sin_, {cfg.max_positions(), cfg.rotary_dim() / 2}, "RoPE sines");
  }
  if (!allocate) return;
  tables.allocate(k_);
  const std::vector<int32_t> local = cp_.local_positions(cfg.seq_length);
  std::vector<int32_t> rows;
  for (int b = 0; b < B_; ++b) rows.insert(rows.end(), local.begin(), local.end());
  k_.memory.from_host(positions_.ints(), rows.data(), N_ * 4);
  if (llama)
    k_.rope_tables(rope_cos_.data(), rope_sin_.data(), cfg.max_positions(), cfg.rotary_dim(), cfg.rotary_base);
}

// The buffers of one call at a time every layer shares (model/layer.h ChunkScratch).
void TransformerChunk::declare_scratch(TensorList& scratch) {
  const ModelConfig& cfg = cfg_;
  const bool sp = tp_.sequence_parallel;
  const int t = tp_.size();
  scratch.set_part("chunk");
  ChunkScratch& s = scratch_;
  scratch.add(s.full, {N_, C_}, "row-parallel partial sums");
  if (sp) scratch.add(s.local, {N_l_, C_}, "row-parallel output, reduced");
  scratch.add(s.norm_out, {N_l_, C_}, "norm output before the gather");
  if (sp) scratch.add(s.rows_full, {N_, C_}, "gathered gradient rows");
  scratch.add(s.full_grad, {N_, C_}, "column-parallel input gradient");
  if (sp) scratch.add(s.local_grad, {N_l_, C_}, "column-parallel input gradient, reduced");
  scratch.add(s.d_heads, {N_, cfg.num_attention_heads / t * cfg.head_dim()}, "attention output gradient");
  if (cfg.attention_output_gate)
    scratch.add(s.d_attn, {N_, cfg.num_attention_heads / t * cfg.head_dim()}, "core attention output gradient");
  scratch.add(s.d_hidden, {N_, cfg.ffn_size() / t}, "MLP activation gradient");
  scratch.add(d_resid_, {N_l_, C_}, "residual gradient");
  if (cfg.hidden_dropout > 0) scratch.add(s.d_branch, {N_l_, C_}, "dropped output gradient");
}

// Parameters in Hugging Face order, the word embeddings first. A tied head on another stage keeps
// its own copy of the word embeddings, declared first as the embedding's, synchronised as
// Megatron's embedding group. A head on the rank of an earlier chunk holding the embedding (the
// first rank of a V) shares that chunk's word embeddings instead.
void TransformerChunk::declare_embeddings(const LayerContext& ctx) {
  ParamRegistry& registry = ctx.registry;
  const std::string word_embeddings = Embedding::word_embeddings_name(cfg_);
  if (spec_.has_embedding) {
    const int first = static_cast<int>(registry.params().size());
    embedding_.emplace(ctx);
    embedding_unit_ = add_unit("embedding", first);
    units_[embedding_unit_].backward_needs_weights = false;
  } else if (spec_.has_head && cfg_.head_reads_embeddings() && registry.has(word_embeddings)) {
    shared_tied_ = registry.index(word_embeddings);
  } else if (spec_.has_head && cfg_.head_reads_embeddings()) {
    tied_copy_ = Embedding::declare_word_embeddings(registry, cfg_, tp_);
  }
}

bool TransformerChunk::build_layers(const LayerContext& ctx, const RecomputeOptions& recompute) {
  const int L = spec_.num_layers;
  bool full_recompute = false;
  first_block_unit_ = static_cast<int>(units_.size());
  for (int i = 0; i < L; ++i) {
    const LayerRecompute r = layer_recompute(recompute, i, L);
    group_start_.push_back(r.full ? recompute_group_start(recompute, i) : i);
    full_recompute |= r.full;
    const char* part = cfg_.moe.is_moe_layer(spec_.first_layer + i) ? "MoE layers" : "layers";
    ctx.buffers.scratch.set_part(part);
    ctx.buffers.shared.set_part(part);
    const int first = static_cast<int>(ctx.registry.params().size());
    blocks_.push_back(std::make_unique<TransformerBlock>(ctx, spec_.first_layer + i, r));
    add_unit(fmt::format("layer {}", spec_.first_layer + i), first);
  }
  return full_recompute;
}

bool TransformerChunk::build_head(const LayerContext& ctx, const RecomputeOptions& recompute) {
  const int words = embedding_ ? embedding_->word_embeddings() : shared_tied_ >= 0 ? shared_tied_ : tied_copy_;
  ctx.buffers.scratch.set_part("head");
  int first = static_cast<int>(ctx.registry.params().size());
  head_.emplace(ctx, cfg_.tied_embeddings() ? words : -1);
  head_unit_ = add_unit("head", first);
  WeightUnit& head = units_[head_unit_];
  if (tied_copy_ >= 0) head.params.push_back(tied_copy_);
  else if (cfg_.tied_embeddings()) head.reads.push_back(words);
  if (cfg_.mtp_num_layers == 0) return false;
  // One more layer, recomputed as a chunk of one layer would be.
  const LayerRecompute r = layer_recompute(recompute, 0, 1);
  ctx.buffers.scratch.set_part("MTP");
  ctx.buffers.shared.set_part("MTP");
  first = static_cast<int>(ctx.registry.params().size());
  mtp_.emplace(ctx, words, head_->lm_head(), r);
  mtp_unit_ = add_unit("mtp", first);
  units_[mtp_unit_].reads = {words};
  if (head_->lm_head() != words) units_[mtp_unit_].reads.push_back(head_->lm_head());
  mtp_loss_sums_.assign(cfg_.mtp_num_layers, 0.0);
  return r.full;
}

// The largest recompute group's tensors: the memory every group borrows in turn. Returns what each
// microbatch keeps (its slot).
std::vector<DeclaredTensor> TransformerChunk::declare_recompute_memory(TensorList& shared, bool full_recompute) {
  ChunkActivations sizes;
  TensorList kept;
  std::vector<TensorList> groups;
  list_saved(sizes, kept, groups);
  int64_t largest = 0;
  for (const TensorList& g : groups) largest = std::max(largest, g.bytes());
  shared.set_part("chunk");
  if (largest > 0) shared.add(recompute_arena_, {largest / 4}, "recompute arena (the largest group's tensors)");
  if (full_recompute) shared.add(recompute_out_, {N_l_, C_}, "recomputed group's output");
  return kept.declared();
}

int TransformerChunk::add_unit(std::string name, int first) {
  WeightUnit unit{.name = std::move(name), .params = {}, .reads = {}, .backward_needs_weights = true};
  for (int i = first; i < static_cast<int>(registry_.params().size()); ++i) unit.params.push_back(i);
  units_.push_back(std::move(unit));
  return static_cast<int>(units_.size()) - 1;
}

void TransformerChunk::bind(const ParamRegistry& registry) const {
  TESSEL_CHECK(&registry == &registry_ && registry.finalized(),
               "model chunk: bind() needs the finalized registry the chunk declared into");
}

std::vector<MicrobatchInput> TransformerChunk::microbatch_inputs(const ModelConfig& cfg, const ChunkSpec& spec,
                                                                const MicrobatchShape& shape) {
  const int64_t n = shape.tokens;
  std::vector<MicrobatchInput> inputs{
      {"tokens", "token ids", {n}, spec.has_embedding ? InputRead::Always : InputRead::Never},
      {"targets", "targets", {n}, spec.has_head ? InputRead::Always : InputRead::Never}};
  if (shape.packed_documents) {
    inputs.push_back({"position_ids", "packed documents' position ids", {n}});
    inputs.push_back({"key_start", "packed documents' attention starts", {n}});
    if (shape.sequence_tokens > 0)
      inputs.push_back({"sequence_key_start", "packed documents' starts, whole sequences", {shape.sequence_tokens}});
  }
  // The sample indices, once per reader: dropout draws in training alone, the forced router's
  // random logits in evaluation too (Megatron draws them there).
  if (cfg.hidden_dropout > 0 || cfg.attention_dropout > 0)
    inputs.push_back({"sample_ids", "sample indices (dropout's key)", {n}, InputRead::WithGradients});
  if (cfg.moe.force_load_balancing)
    inputs.push_back({"routing_sample_ids", "sample indices (the random router logits' key)", {n}});
  const int64_t D = cfg.mtp_num_layers;
  if (spec.has_head && D > 0) {
    inputs.push_back({"shifted_tokens", "MTP shifted token ids", {D, n}, InputRead::WithGradients});
    inputs.push_back({"shifted_targets", "MTP shifted targets", {D, n}, InputRead::WithGradients});
  }
  return inputs;
}

std::vector<StepTerm> TransformerChunk::take_step_terms() {
  RouterTotals totals;
  for (auto& b : blocks_)
    if (MoeLayer* moe = b->moe()) totals.add(moe->take_router_totals());
  for (int d = 0; d < mtp_depths(); ++d)
    if (MoeLayer* moe = mtp_->layer(d).moe()) totals.add(moe->take_router_totals());
  std::vector<StepTerm> terms{router_statistics(totals, cfg_.moe.z_loss_coeff != 0)};
  if (cfg_.mtp_num_layers > 0) {
    std::vector<double> sums(cfg_.mtp_num_layers, 0.0);
    if (mtp_) std::swap(sums, mtp_loss_sums_);
    terms.push_back(mtp_losses(std::move(sums), cfg_.mtp_loss_scaling_factor));
  }
  return terms;
}

void TransformerChunk::set_loss_scales(const std::string& term, std::vector<float> scales) {
  if (!mtp_ || term != "mtp") return;
  TESSEL_CHECK(static_cast<int>(scales.size()) == mtp_depths(), "model chunk: {} MTP loss scales for {} depths",
               scales.size(), mtp_depths());
  mtp_loss_scales_ = std::move(scales);
}

int64_t TransformerChunk::shared_activation_bytes() const {
  int64_t n = held_bytes(recompute_arena_) + held_bytes(recompute_out_);
  for (const auto& b : blocks_)
    if (const MoeLayer* moe = b->moe()) n += moe->shared_activation_bytes();
  for (int d = 0; d < mtp_depths(); ++d)
    if (const MoeLayer* moe = mtp_->layer(d).moe()) n += moe->shared_activation_bytes();
  return n;
}

// Layer i's input resid[i] is kept unless it lies inside a full-recompute group (the group keeps
// only its first input); the chunk's output is always kept (the next stage reads it, the head
// too).
void TransformerChunk::list_saved(ChunkActivations& a, TensorList& kept,
                                  std::vector<TensorList>& groups) const {
  const int L = spec_.num_layers;
  a.resid.resize(L + 1);
  a.layers.resize(L);
  groups.assign(L + (mtp_ ? 1 : 0), TensorList());  // the MTP layers' recomputed tensors last
  for (int i = 0; i <= L; ++i) {
    TensorList& list = i < L && group_start_[i] < i ? groups[group_start_[i]] : kept;
    list.set_part("residual stream");
    list.add(a.resid[i], {N_l_, C_}, i < L ? "layer input" : "chunk output");
  }
  kept.set_part("embedding");
  if (embedding_) embedding_->list_saved(a.embedding, kept);
  for (int i = 0; i < L; ++i) {
    SavedLists lists{kept, groups[group_start_[i]]};
    lists.set_part(blocks_[i]->moe() ? "MoE layers" : "layers");
    blocks_[i]->list_saved(a.layers[i], lists);
  }
  kept.set_part("head");
  if (head_) head_->list_saved(a.head, kept);
  if (mtp_) {
    SavedLists lists{kept, groups[L]};
    lists.set_part("MTP");
    mtp_->list_saved(a.mtp, lists);
  }
}

ChunkActivations TransformerChunk::make_activations() const {
  ChunkActivations a;
  TensorList kept;
  std::vector<TensorList> groups;
  list_saved(a, kept, groups);
  kept.allocate(k_);
  a.allocated_bytes = kept.bytes();
  for (TensorList& g : groups) g.carve(recompute_arena_);
  return a;
}

double TransformerChunk::forward(ChunkActivations& acts, const InputRows& rows, const float* input,
                                 float grad_scale) {
  const int32_t* targets = input_rows(rows, "targets");
  const PackedRows packed{input_rows(rows, "position_ids"), input_rows(rows, "key_start"),
                          input_rows(rows, "sequence_key_start"), input_rows(rows, "sample_ids"),
                          input_rows(rows, "routing_sample_ids")};
  if (embedding_) {
    acquire(embedding_unit_, false);
    embedding_->forward(acts.embedding, acts.resid[0].data(), input_rows(rows, "tokens"), packed, scratch_);
    release(embedding_unit_, false);
  } else {
    k_.copy(acts.resid[0].data(), input, N_l_ * C_);
  }
  acts.grad_scale = grad_scale;
  acts.packed = packed;
  for (int i = 0; i < spec_.num_layers; ++i) {
    acquire(first_block_unit_ + i, false);
    blocks_[i]->forward(acts.layers[i], acts.resid[i + 1].data(), acts.resid[i].data(), grad_scale,
                        packed, scratch_);
    release(first_block_unit_ + i, false);
  }
  acts.loss_sum = 0.0;
  if (head_) {
    acquire(head_unit_, false);
    acts.loss_sum = head_->forward(acts.head, acts.resid.back().data(), targets, grad_scale, scratch_);
    release(head_unit_, false);
  }
  if (mtp_ && targets != nullptr && grad_scale > 0) {
    const MtpRows mtp{input_rows(rows, "shifted_tokens"), input_rows(rows, "shifted_targets")};
    TESSEL_CHECK(mtp.tokens != nullptr && mtp.targets != nullptr && !mtp_loss_scales_.empty(),
                 "model chunk: multi-token prediction needs the microbatch's shifted rows and its loss scales");
    acquire(mtp_unit_, false);
    mtp_->forward(acts.mtp, acts.head, mtp, grad_scale, mtp_loss_scales_.data(), packed, scratch_);
    release(mtp_unit_, false);
    for (int d = 0; d < mtp_depths(); ++d) mtp_loss_sums_[d] += acts.mtp.loss_sums[d];
  }
  return acts.loss_sum;
}

ChunkDecodeState TransformerChunk::make_decode_state() const {
  TESSEL_CHECK(embedding_ && head_ && B_ == 1 && tp_.size() == 1 && cp_.size() == 1,
               "decoding needs the whole model in one process, built for one sequence");
  ChunkDecodeState state;
  state.layers.resize(blocks_.size());
  TensorList list;
  list.set_part("decode state");
  for (size_t i = 0; i < blocks_.size(); ++i) blocks_[i]->list_decode_state(state.layers[i], list);
  list.allocate(k_);
  return state;
}

void TransformerChunk::decode(ChunkActivations& acts, ChunkDecodeState& state, const int32_t* tokens,
                              int64_t n) {
  TESSEL_CHECK(n > 0 && state.length + n <= T_, "decode: {} tokens after {} do not fit the context of {}", n,
               state.length, T_);
  embedding_->decode(acts.embedding, acts.resid[0].data(), tokens, state.length, n);
  for (int i = 0; i < spec_.num_layers; ++i)
    blocks_[i]->decode(acts.layers[i], state.layers[i], acts.resid[i + 1].data(), acts.resid[i].data(),
                       state.length, n, scratch_);
  head_->decode(acts.head, acts.resid.back().data(), n);
  state.length += n;
}

// The group's output was kept: the recomputed one goes to scratch, leaving the kept one (which a
// send may still be reading) alone.
void TransformerChunk::recompute_group(ChunkActivations& acts, int first, int end) {
  for (int i = first; i < end; ++i) {
    float* out = i + 1 == end ? recompute_out_.data() : acts.resid[i + 1].data();
    blocks_[i]->forward(acts.layers[i], out, acts.resid[i].data(), acts.grad_scale, acts.packed, scratch_,
                        true);
  }
}

void TransformerChunk::backward(ChunkActivations& acts, const float* d_output, float* d_input,
                                const GradReady& grad_ready) {
  backward_input(acts, d_output, d_input, grad_ready);
  backward_weight(acts, grad_ready);
}

// dres: the gradient of the residual stream, updated in place from the chunk's output back to its
// input; it ends as d(input), in the caller's buffer when there is one. A head tied to this
// chunk's own embedding adds its weight gradient first, before the embedding's: each
// microbatch's two parts of that gradient add in the same order whether or not the weight
// gradients are split off (and as when the forward computed the head's).
void TransformerChunk::backward_input(ChunkActivations& acts, const float* d_output,
                                      float* d_input, const GradReady& grad_ready) {
  float* dres = d_input != nullptr ? d_input : d_resid_.data();
  if (head_) {
    if (tied_here()) head_->backward_weight(acts.head);
    k_.zero(dres, N_l_ * C_);
    if (mtp_) {  // adds to the head's output gradient first
      acquire(mtp_unit_, true);
      mtp_->backward_input(acts.mtp, acts.head, acts.grad_scale, acts.packed, recompute_out_.data(), scratch_,
                           grad_ready);
      release(mtp_unit_, true);
      if (shared_tied_ >= 0) report_ready(grad_ready, {shared_tied_});
    }
    acquire(head_unit_, true);
    head_->backward_input(acts.head, dres, acts.resid.back().data());
    release(head_unit_, true);
    report_ready(grad_ready, {head_->norm().weight(), head_->norm().bias()});
  } else {
    k_.copy(dres, d_output, N_l_ * C_);
  }
  for (int end = spec_.num_layers; end > 0;) {  // a recompute group [first, end) at a time
    const int first = group_start_[end - 1];
    const bool recomputed = blocks_[first]->recompute().full;
    // A recomputed group's layers are whole from its recompute to their own backward.
    for (int i = recomputed ? first : end; i < end; ++i) acquire(first_block_unit_ + i, true);
    if (recomputed) recompute_group(acts, first, end);
    for (int i = end - 1; i >= first; --i) {
      if (!recomputed) acquire(first_block_unit_ + i, true);
      blocks_[i]->backward_input(acts.layers[i], dres, acts.resid[i].data(), scratch_, grad_ready);
      release(first_block_unit_ + i, true);
    }
    end = first;
  }
  if (embedding_) {  // its backward adds rows of gradient: no weights needed
    embedding_->backward(acts.embedding, dres, scratch_);
    grads_written(embedding_unit_);
    report_ready(grad_ready, {embedding_->word_embeddings(), embedding_->position_embeddings()});
  }
}

// The head first, then the last layer first, as backward_input, so data parallelism's buckets
// (cut from the end of the parameters) fill in the same order. The LM head's weight is reported
// final unless the embedding's backward adds to it too: in this chunk (reported with the
// embedding), or as a last stage's copy (summed over the embedding group after the pipeline). A
// head sharing another chunk's embeddings reports them: the executor passes that on once both
// chunks have (shared_tied_embedding).
void TransformerChunk::backward_weight(ChunkActivations& acts, const GradReady& grad_ready) {
  if (head_ && !tied_here()) {
    head_->backward_weight(acts.head);
    if (mtp_) mtp_->lm_head_backward_weight(acts.mtp);
    report_ready(grad_ready, {!cfg_.tied_embeddings() ? head_->lm_head() : shared_tied_});
  }
  grads_written(head_unit_);
  if (mtp_) {
    mtp_->backward_weight(acts.mtp, grad_ready);
    grads_written(mtp_unit_);
  }
  for (int i = spec_.num_layers - 1; i >= 0; --i) {
    blocks_[i]->backward_weight(acts.layers[i], grad_ready);
    grads_written(first_block_unit_ + i);
  }
}

}  // namespace tessel
