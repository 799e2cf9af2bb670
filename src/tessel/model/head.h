// The head of the last pipeline chunk: the final norm on this rank's rows, gathered to all rows,
// the vocabulary-parallel LM head (each TP rank computes the logits of its vocabulary shard for
// all N rows; GPT-2's is the tied word embedding) and the loss, Megatron's
// vocab_parallel_cross_entropy (parallel/tensor_parallel.h).
//
// The loss gradient's scale is known before the forward (1 / tokens of the global batch), so the
// forward also computes the logits' gradient and the final norm's output gradient, which is all
// the backward of the rest needs. The LM head's weight gradient comes from the logits' gradient
// and the norm's output, both saved, in backward_weight: a zero-bubble schedule defers it like
// every other weight gradient. Without gradients (generation, evaluation) the logits are scratch
// shared by all microbatches.
#pragma once

#include <cstdint>

#include "tessel/model/config.h"
#include "tessel/model/layer.h"
#include "tessel/model/layer_context.h"
#include "tessel/model/norm.h"
#include "tessel/parallel/tensor_parallel.h"

namespace tessel {

class Head {
 public:
  struct Saved {
    Norm::Saved norm;  // (N_l) statistics
    Tensor out;        // (N, C) the final norm's output, gathered to all rows
    Tensor d_out;      // (N_l, C) its gradient, from the loss
    Tensor d_logits;   // (N, V_l) the loss's gradient by this rank's logits (none when decoding)
  };

  // Declares the final norm and, unless `tied_embedding` (GPT-2's word embedding index, -1 for
  // llama) is given, lm_head.weight [V, C] split over TP by vocabulary rows, on ctx.rows() rows;
  // its scratch in ctx.buffers.scratch. `mtp_norm`: a multi-token prediction depth's head
  // (model/mtp.h), its norm of that name and the LM head `tied_embedding`, used only with
  // gradients (no logits kept).
  Head(const LayerContext& ctx, int tied_embedding, const std::string& mtp_norm = {});

  void list_saved(Saved& s, TensorList& buffers) const;
  // x_local (N_l, C): the last layer's output. With targets (N) i32: returns Σ of the token losses
  // and, when grad_scale > 0, fills s.d_logits and s.d_out. Without targets: logits() holds this
  // rank's (N, V_l) logits afterwards; returns 0.
  double forward(Saved& s, const float* x_local, const int32_t* targets, float grad_scale,
                 ChunkScratch& scratch);
  // Incremental decoding (one process): logits() holds the (1, V_l) logits of the last of the n
  // rows of x (n, C), the last layer's output.
  void decode(Saved& s, const float* x, int64_t n);
  // dx (N_l, C) += d(x) through the final norm (its weight gradients too).
  void backward_input(const Saved& s, float* dx, const float* x_local) const;
  // The LM head's weight gradient (the tied embedding's, for GPT-2) from s.d_logits and s.out,
  // accumulated. No communication.
  void backward_weight(const Saved& s) const;

  const float* logits() const { return logits_.data(); }
  int64_t vocab_start() const { return vocab_start_; }
  int64_t vocab_size_local() const { return V_l_; }
  int64_t vocab_valid() const { return V_valid_; }
  const Norm& norm() const { return norm_; }
  int lm_head() const { return lm_head_; }

 private:
  const Kernels& k_;
  ParamView params_;
  TensorParallel tp_;
  Norm norm_;
  int64_t N_, C_, vocab_size_, V_l_, V_valid_, vocab_start_;
  int lm_head_ = -1;
  bool decoding_;      // LayerContext::decoding
  Tensor logits_;      // (N, V_l) without gradients; (1, V_l) when decoding
  Tensor loss_stats_;  // (4, N) vocab_parallel_cross_entropy's scratch
  Tensor lse_;         // (N)
};

}  // namespace tessel
