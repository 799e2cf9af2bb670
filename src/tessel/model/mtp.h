// Multi-token prediction (Megatron-Core's multi_token_prediction.py, --mtp-num-layers D
// --mtp-loss-scaling-factor s; DeepSeek-V3's MTP as Qwen3-Next ships it): on the chunk with the
// head, after the main decoder's final norm. Depth k = 1..D predicts the token k + 1 ahead:
//   ids_k    = the tokens shifted k to the left (the positions past the end: id 0, out of the loss)
//   m_k      = fc_k(cat(norm_e(embed(ids_k)), norm_h(h_{k-1})))       fc_k [C, 2C], embedding first
//   h_k      = mtp.norm_k(layer_k(m_k))                                one decoder layer
//   loss_k   = CE(lm_head(h_k), targets shifted k to the left)
// with h_0 the main decoder's output after its final norm and the word embeddings and the LM head
// the model's own (a last pipeline stage keeps a copy of the embeddings, summed over the embedding
// group as a tied embedding is). The layer is built as the last decoder layer is (attention, and
// the MLP or MoE block of the last layer: Qwen3-Next's full gated attention with its MoE block).
// The objective adds s / D · Σ_k loss_k, each loss_k the mean over the global batch's tokens that
// its shifted loss mask keeps (Megatron divides each depth's masked sum by the rolled mask's count;
// tessel counts over the global batch as it does for the LM loss, so every layout trains the same).
//
// The shifted ids and targets come with the microbatch, as its "shifted_tokens" and
// "shifted_targets" inputs (model/microbatch_inputs.h: the loader shifts whole sequences, then
// takes this CP rank's rows): a shift over the whole sequence, as Megatron's
// roll_tensor exchanges the chunk ends between CP ranks. Packed documents: the shift runs over the
// whole sequence, across document ends, as Megatron's roll for its (non-THD) packed batches;
// the layer's attention keeps the main layers' document mask and RoPE positions.
//
// Names (Hugging Face's Qwen3-Next / vLLM qwen3_next_mtp, depth 1): mtp.pre_fc_norm_embedding,
// mtp.pre_fc_norm_hidden, mtp.fc, mtp.layers.0.* (a decoder layer), mtp.norm. Depth k > 1 has its
// own modules as Megatron's (Hugging Face's layout has one set): mtp.layers.{k-1}.fc.weight, ….
//
// Tensor parallelism: fc is replicated, each rank projecting its own rows (all of them without
// sequence parallel): exact, as Megatron's column-parallel eh_proj followed by its gather; under
// sequence parallel its gradient, and the norms', come from each rank's rows and are summed over TP
// as every replicated parameter's (parallel/grad_sync.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "tessel/model/block.h"
#include "tessel/model/embedding.h"
#include "tessel/model/head.h"
#include "tessel/model/norm.h"

namespace tessel {

// The microbatch's shifted rows for the D depths, (D, N) i32 each in the model's memory: depth k's
// ids and targets at [(k−1)·N, k·N).
struct MtpRows {
  const int32_t* tokens = nullptr;
  const int32_t* targets = nullptr;
};

class MultiTokenPrediction {
 public:
  // N rows (B·T_l), N_l this rank's. One depth's activations.
  struct Depth {
    Embedding::Saved embedding;
    Tensor emb;             // (N_l, C) embed(ids_k), norm_e's input
    Norm::Saved enorm, hnorm;
    Tensor e, h;            // (N_l, C) each: norm_e and norm_h outputs, fc's two inputs
    Tensor m;               // (N_l, C) fc's output, the layer's input
    Tensor d_m;             // (N_l, C) its gradient, for fc's weight gradient
    TransformerBlock::Saved layer;
    Tensor x;               // (N_l, C) the layer's output, mtp.norm's input
    Head::Saved head;       // mtp.norm's output h_k (gathered) and the loss's gradients
  };
  struct Saved {
    std::vector<Depth> depths;
    std::vector<double> loss_sums;  // Σ of each depth's token losses
  };

  // word_embeddings, lm_head: registry indices of the model's (or a last stage's copy of the)
  // word embeddings and its LM head. Declares the modules' parameters in Hugging Face order;
  // the chunk's context (model/layer_context.h) and the recompute as the chunk's layers have them.
  MultiTokenPrediction(const LayerContext& ctx, int word_embeddings, int lm_head, LayerRecompute recompute);

  // Kept tensors in `lists.kept`; a layer under full recompute lists its own in `lists.recomputed`
  // (its input kept).
  void list_saved(Saved& s, SavedLists& lists) const;
  // main: the main head's activations (its output is h_0). grad_scale: the chunk's (the MoE
  // auxiliary losses' weight, as in every layer); loss_scales (D): each depth's loss gradient
  // scale, s / D / its counted tokens of the global batch. Fills s.loss_sums.
  void forward(Saved& s, const Head::Saved& main, const MtpRows& rows, float grad_scale,
               const float* loss_scales, const PackedRows& packed, ChunkScratch& scratch);
  // Adds d(h_0) to main.d_out; the embeddings' gradient (into word_embeddings'), the norms'
  // and the layers' input halves; reports the norms to `ready`. A layer under full recompute
  // runs its forward again first (the forward's grad_scale and packed), its output into
  // `recompute_out` (N_l, C) (the kept one stays).
  void backward_input(Saved& s, Head::Saved& main, float grad_scale, const PackedRows& packed,
                      float* recompute_out, ChunkScratch& scratch, const GradReady& ready);
  // The LM head's (not reported: the chunk reports it with its own) and every depth's fc and
  // layer weight gradients.
  void backward_weight(Saved& s, const GradReady& ready);
  // The LM head's gradient parts from each depth's logits' gradient, first in backward_weight.
  void lm_head_backward_weight(Saved& s);

  int depths() const { return static_cast<int>(depths_.size()); }
  TransformerBlock& layer(int d) { return *depths_[d].layer; }
  const TransformerBlock& layer(int d) const { return *depths_[d].layer; }

 private:
  struct Module {
    std::optional<Embedding> embedding;
    std::optional<Norm> enorm, hnorm;
    int fc = -1;  // [C, 2C]
    std::unique_ptr<TransformerBlock> layer;
    std::optional<Head> head;  // mtp.norm and the shared LM head
  };
  // The local rows (N_l, C) of depth d's input h_{d−1} and where its gradient adds.
  const float* input_rows(const Saved& s, const Head::Saved& main, int d) const;
  float* input_grad(Saved& s, Head::Saved& main, int d) const;

  const Kernels& k_;
  ParamView params_;
  TensorParallel tp_;
  int64_t N_, N_l_, C_;
  std::vector<Module> depths_;
};

}  // namespace tessel
