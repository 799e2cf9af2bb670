// The decoder-only Transformer, GPT-2 or Llama flavoured, as a pipeline chunk: a contiguous range
// of layers (block.h), plus the embedding (embedding.h) when it is the first chunk and the head
// (head.h: final norm, LM head and loss) when it is the last. One process training alone runs
// one chunk holding everything.
//
// Forward and backward are explicit (DESIGN invariant 4): forward(acts, ...) is a flat list of
// the layers' calls filling a per-microbatch ChunkActivations with exactly what backward needs;
// backward is the same list reversed, accumulating parameter gradients. Whoever runs the
// microbatch owns its activations, so several microbatches can be in flight; one microbatch's
// activations are one allocation, carved from the list each layer gives of its Saved. Scratch
// that lives only inside one call is shared.
//
// Backward comes in two halves, as zero-bubble schedules need: backward_input computes
// d(input), saving every linear's output gradient in the microbatch's activations, and
// backward_weight later turns those into the linears' weight and bias gradients. backward runs
// both at once.
//
// Tensor parallelism (parallel/tensor_parallel.h) splits attention heads (and query groups), MLP
// neurons and the (padded) vocabulary over the TP group; rows are N_l = N/TP under sequence
// parallel, else N.
//
// The model answers its own shapes: TransformerChunk::declare runs the same constructors without
// allocating or computing anything, for the parameters (names, global shapes, shard specs) and
// every tensor the chunk would hold (ChunkTensors): what `tessel plan` counts on CPU ranks, what
// --profile-report reports and the names --save-hf writes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessel/core/tensor.h"
#include "tessel/model/block.h"
#include "tessel/model/config.h"
#include "tessel/model/embedding.h"
#include "tessel/model/head.h"
#include "tessel/model/layer.h"
#include "tessel/model/layer_context.h"
#include "tessel/model/microbatch_inputs.h"
#include "tessel/model/moe/moe.h"
#include "tessel/model/mtp.h"
#include "tessel/model/recompute.h"
#include "tessel/model/step_terms.h"
#include "tessel/parallel/weight_units.h"
#include "tessel/parallel/context_parallel.h"
#include "tessel/parallel/tensor_parallel.h"

namespace tessel {

struct ChunkSpec {
  int first_layer = 0;
  int num_layers = 0;
  bool has_embedding = true;  // first pipeline chunk
  bool has_head = true;       // last pipeline chunk: final norm, LM head, loss
};

// What a chunk is built as: its layers and ends (spec), the sequences of each microbatch, and
// what its layers recompute in their backward instead of keeping (model/recompute.h, valid
// options; the recomputed activations live in memory all its microbatches share).
struct ChunkBuild {
  ChunkSpec spec;
  int64_t micro_batch = 1;
  RecomputeOptions recompute = {};
  uint64_t seed = 0;  // --seed: the dropout masks' key (kernels/dropout.h)
  // Built for incremental decoding alone (infer/decoder.h): the head keeps the logits of one row,
  // and nothing for gradients, instead of (N, vocabulary) twice; forward() is refused.
  bool decoding = false;
};

// The groups a chunk is split over, whose communicators must outlive it: TP (attention heads and
// query groups, MLP neurons, the padded vocabulary, and the rows under sequence parallel), CP
// (each sequence's positions: this CP rank's seq_length / CP rows, parallel/context_parallel.h)
// and the MoE layers' EP, ETP and token group (model/layer_context.h).
struct ChunkGroups {
  TensorParallel tp;
  ContextParallel cp;
  MoeGroups moe;

  // One process: no TP, CP or expert parallelism.
  static ChunkGroups one_process(const Kernels& k) {
    return {.tp = no_tensor_parallel(k), .cp = no_context_parallel(k), .moe = {}};
  }
};

// A rank's place in the groups a chunk is split over, for the declare-only build (which needs no
// communicator): each group's size and this rank's index in it.
struct ChunkPlace {
  int tp = 1, tp_rank = 0;
  bool sequence_parallel = false;
  int cp = 1, cp_rank = 0;
  int ep = 1, ep_rank = 0;
  int etp = 1, etp_rank = 0;
};

// Every tensor a chunk holds besides its parameters, as its layers declare them (layer.h): one
// microbatch slot's (make_activations; the MoE buffers that grow with the routing at their
// balanced-load size), the memory recomputed activations share once per chunk, and the scratch
// of one call at a time.
struct ChunkTensors {
  std::vector<DeclaredTensor> slot, shared, scratch;
};

// One microbatch's activations for one chunk.
struct ChunkActivations {
  std::vector<Tensor> resid;  // num_layers + 1 tensors (N_l, C): each layer's input, then the output
  Embedding::Saved embedding;                   // first chunk
  std::vector<TransformerBlock::Saved> layers;
  Head::Saved head;                             // last chunk
  MultiTokenPrediction::Saved mtp;              // last chunk with --mtp-num-layers
  double loss_sum = 0;                          // Σ of this microbatch's token losses
  float grad_scale = 0;                         // the forward's, for a recompute
  PackedRows packed;                            // the forward's documents, for a recompute
  int64_t allocated_bytes = 0;                  // the one allocation above

  // Everything a slot holds: the allocation and the MoE buffers that grow with routing.
  int64_t bytes() const;
};

// Incremental decoding of one sequence (infer/decoder.h): what every layer carries from one
// position to the next (model/block.h), in one allocation, zeros at the start (no conv history,
// a zero delta-rule state), and how many positions it has read.
struct ChunkDecodeState {
  std::vector<TransformerBlock::DecodeState> layers;
  int64_t length = 0;  // positions read: 0 … length−1
};

class TransformerChunk {
 public:
  // Declares this chunk's parameters — this TP rank's shards — in `registry` (before
  // registry.finalize()). The chunk computes with `k` (kernels/kernels.h); its activations live in
  // k's memory. MoE layers (cfg.moe) need sequence parallel with TP.
  TransformerChunk(const Kernels& k, ParamRegistry& registry, const ModelConfig& cfg, const ChunkBuild& build,
                   const ChunkGroups& groups);
  TransformerChunk(const TransformerChunk&) = delete;
  TransformerChunk& operator=(const TransformerChunk&) = delete;
  // The declare-only build of the chunk of the rank at `place`: its parameters declared in
  // `registry` as the constructor declares them, and its tensors, with nothing allocated or
  // computed (no RoPE tables, no positions) and no communicator. Throws as the constructor does.
  static ChunkTensors declare(const ModelConfig& cfg, const ChunkBuild& build, const ChunkPlace& place,
                              ParamRegistry& registry);
  // After registry.finalize(): the registry the chunk declared into.
  void bind(const ParamRegistry& registry) const;
  // The rows a microbatch brings the chunk of `spec` (model/microbatch_inputs.h): the tokens and
  // targets (read by the first chunk and the last), the packed documents' position ids and
  // attention starts (every chunk), and on a last chunk with multi-token prediction its D depths'
  // shifted tokens and targets, D rows each (model/mtp.h), read by a forward with gradients; with
  // dropout, each row's sample index in the run (its masks' key), read by a forward with gradients;
  // with --moe-router-force-load-balancing by every forward (the random router logits' key).
  static std::vector<MicrobatchInput> microbatch_inputs(const ModelConfig& cfg, const ChunkSpec& spec,
                                                        const MicrobatchShape& shape);
  std::vector<MicrobatchInput> microbatch_inputs(const MicrobatchShape& shape) const {
    return microbatch_inputs(cfg_, spec_, shape);
  }
  // The step's terms besides the LM loss (model/step_terms.h), the same list on every chunk of a
  // model: the MoE routers' statistics, and with --mtp-num-layers the depths' losses, this chunk's
  // sums since the last call (zeros where it has none of those layers); starts new sums.
  std::vector<StepTerm> take_step_terms();
  // A side loss's gradient scales for the next forwards (StepTerm::weight / the tokens each of its
  // values counts in the global batch); ignored on a chunk without that term's layers.
  void set_loss_scales(const std::string& term, std::vector<float> scales);

  // Sized once per microbatch slot and reused every iteration.
  ChunkActivations make_activations() const;

  // Reads its inputs by name from `rows` (microbatch_inputs; those absent are not read): the first
  // chunk its tokens (B, T) i32; others `input` (N_l, C) from the previous stage. Last chunk with
  // targets: computes the loss and, when grad_scale > 0, the head's gradient at once (so the
  // (N, V_l) logits are never kept per microbatch); returns Σ token losses. Without targets,
  // logits() holds this rank's (N, V_l) logits afterwards. Packed documents' rows (layer.h) are
  // kept until its backward. Multi-token prediction runs on a last chunk computing gradients (its
  // losses go to take_step_terms; without gradients, as in evaluation, the MTP layers do not run:
  // the LM loss is the model's).
  double forward(ChunkActivations& acts, const InputRows& rows, const float* input, float grad_scale);
  // d_output (N_l, C): gradient of this chunk's output (ignored on the last chunk).
  // d_input (N_l, C): where the gradient of the chunk's input goes (not on the first chunk).
  // grad_ready(index), when given, is called once for every parameter (registry index) as soon
  // as this microbatch's backward has finished adding to its gradient: data parallelism starts
  // reducing there. backward = backward_input, then backward_weight, with the same grad_ready.
  void backward(ChunkActivations& acts, const float* d_output, float* d_input,
                const GradReady& grad_ready = {});
  // Everything d(input) needs: the gradients of the activations through every layer, the norms,
  // attention, RoPE and the linears' input-gradient GEMMs. It also finishes the gradients that
  // need no saved output gradient — the norms' weights and biases, the embeddings (first chunk;
  // with the LM head tied to them in the same chunk, its weight gradient too) — and reports those
  // to grad_ready. Saves each linear's output gradient in acts for backward_weight; d_input is
  // complete on return. Recomputed layers (--recompute-*) run their forward again first.
  void backward_input(ChunkActivations& acts, const float* d_output, float* d_input,
                      const GradReady& grad_ready = {});
  // The linears' weight-gradient GEMMs and bias gradients — the LM head's too, from the logits'
  // gradient the forward saved — from what backward_input saved in the same acts (any other
  // microbatches' halves may run in between); reports every linear's weight and bias to
  // grad_ready. No communication. Call once after each backward_input.
  void backward_weight(ChunkActivations& acts, const GradReady& grad_ready = {});

  // Incremental decoding, on a whole model (embedding and head) of one process built for one
  // sequence (micro batch 1): its context is seq_length positions. The state starts empty.
  ChunkDecodeState make_decode_state() const;
  // Reads n tokens (n) i32 at positions state.length … state.length+n−1 (at most seq_length in
  // all) with every layer's decode step, acts serving as scratch; logits() then holds the (1, V_l)
  // logits of the last of them, equal to those the forward of the whole sequence gives at its
  // position (the next token is drawn from them alone). A prefill reads the prompt at once, each
  // decoding step one token.
  void decode(ChunkActivations& acts, ChunkDecodeState& state, const int32_t* tokens, int64_t n);

  const float* logits() const { return head_->logits(); }
  int64_t vocab_shard_start() const { return head_->vocab_start(); }
  int64_t vocab_shard_size() const { return head_->vocab_size_local(); }
  int64_t vocab_shard_valid() const { return head_->vocab_valid(); }
  const float* output(const ChunkActivations& acts) const { return acts.resid.back().data(); }
  int64_t local_rows() const { return N_l_; }
  int64_t hidden_size() const { return C_; }
  // The registry index of this chunk's copy of the word embeddings that it does not own (a last
  // pipeline stage without the embedding whose tied head or MTP reads them), else -1: kept equal
  // over the embedding group.
  int tied_embedding_copy() const { return tied_copy_; }
  // The registry index of a tied embedding this chunk's head shares with an earlier chunk of the
  // same rank (the first rank of a V holds the embedding and the head), else -1. Both chunks
  // report it to grad_ready; it is final once both have.
  int shared_tied_embedding() const { return shared_tied_; }
  // The tensors the chunk declared (allocated, in this build).
  const ChunkTensors& tensors() const { return tensors_; }
  // Its parameters in units (parallel/weight_units.h): the embedding, each layer, the head (with a
  // tied copy of the word embeddings), the MTP layers — those the chunk has, in forward order.
  const std::vector<WeightUnit>& weight_units() const { return units_; }
  // From now on the chunk tells `hooks` around each unit's computation; unit u of weight_units()
  // is hooks' unit first_unit + u. nullptr: nobody listens.
  void set_weight_hooks(WeightUnitHooks* hooks, int first_unit) {
    hooks_ = hooks;
    first_unit_ = first_unit;
  }
  // Memory of the activations recomputed inside a backward (--recompute-*), shared by all
  // microbatches, as held now: part of the activation memory, apart from the slots.
  int64_t shared_activation_bytes() const;

 private:
  // `allocate` false: the declare-only build.
  TransformerChunk(const Kernels& k, ParamRegistry& registry, const ModelConfig& cfg, const ChunkBuild& build,
                   const ChunkGroups& groups, bool allocate);

  // The constructor's steps, in order.
  void check_split(int64_t micro_batch) const;
  void declare_tables(TensorList& tables, bool allocate);
  void declare_scratch(TensorList& scratch);
  void declare_embeddings(const LayerContext& ctx);
  // These two return whether a layer recomputes in full (needing a group's output buffer).
  bool build_layers(const LayerContext& ctx, const RecomputeOptions& recompute);
  bool build_head(const LayerContext& ctx, const RecomputeOptions& recompute);
  std::vector<DeclaredTensor> declare_recompute_memory(TensorList& shared, bool full_recompute);

  const Kernels& k_;
  const ParamRegistry& registry_;
  ModelConfig cfg_;
  ChunkSpec spec_;
  TensorParallel tp_;
  ContextParallel cp_;
  int64_t B_, T_, N_, N_l_, C_;
  Tensor positions_;            // (N) i32: global position of each row b·T_l + t
  Tensor rope_cos_, rope_sin_;  // (max positions, D/2), llama
  ChunkScratch scratch_;
  Tensor d_resid_;              // (N_l, C) the residual gradient of a first chunk
  // The head is tied to this chunk's own embedding (one process, or a single stage).
  bool tied_here() const { return head_ && embedding_ && cfg_.tied_embeddings(); }
  // Lists a's tensors: what each microbatch keeps, and per recompute group what it recomputes.
  void list_saved(ChunkActivations& a, TensorList& kept, std::vector<TensorList>& groups) const;
  // Layers [first, end) of a full-recompute group, forward again from their kept input.
  void recompute_group(ChunkActivations& acts, int first, int end);

  std::optional<Embedding> embedding_;
  int tied_copy_ = -1, shared_tied_ = -1;
  std::vector<std::unique_ptr<TransformerBlock>> blocks_;
  std::vector<int> group_start_;  // per layer: the first layer of its recompute group
  Tensor recompute_arena_;        // the recomputed tensors of one group at a time
  Tensor recompute_out_;          // (N_l, C) a recomputed group's output, already kept
  std::optional<Head> head_;
  std::optional<MultiTokenPrediction> mtp_;
  int mtp_depths() const { return mtp_ ? mtp_->depths() : 0; }
  std::vector<float> mtp_loss_scales_;
  std::vector<double> mtp_loss_sums_;
  ChunkTensors tensors_;
  // Weight units (weight_units()): each part's index in units_, -1 where the chunk lacks it.
  std::vector<WeightUnit> units_;
  int embedding_unit_ = -1, head_unit_ = -1, mtp_unit_ = -1;
  int first_block_unit_ = 0;  // layer i's unit is first_block_unit_ + i
  WeightUnitHooks* hooks_ = nullptr;
  int first_unit_ = 0;
  // Adds a unit of the parameters declared from registry index `first` on; returns its index.
  int add_unit(std::string name, int first);
  void acquire(int unit, bool backward) const {
    if (hooks_ && unit >= 0) hooks_->acquire(first_unit_ + unit, backward);
  }
  void release(int unit, bool backward) const {
    if (hooks_ && unit >= 0) hooks_->release(first_unit_ + unit, backward);
  }
  void grads_written(int unit) const {
    if (hooks_ && unit >= 0) hooks_->grads_written(first_unit_ + unit);
  }
};

}  // namespace tessel
