// Gated DeltaNet, the linear-attention mixer of Qwen3-Next / Qwen3.5 (Hugging Face's
// Qwen3_5GatedDeltaNet, Megatron's GatedDeltaNet), on layers --linear-attention-freq marks:
//   qkv = in_proj_qkv(x), z = in_proj_z(x), b = in_proj_b(x), a = in_proj_a(x)
//   [q | k | v] = silu(causal depthwise conv1d(qkv))      (z, b, a are not convolved)
//   q, k = l2norm per head;  β = sigmoid(b);  g = −exp(A_log)·softplus(a + dt_bias)
//   o = the gated delta rule over (q, k, v, β, g), value head j reading key head j / (Hv/Hk)
//   out = out_proj(rmsnorm(o) · norm.weight · silu(z))   per value head of dv
// Parameters, with Hugging Face's (Qwen3.5's flat) names and shapes:
//   model.layers.N.linear_attn.in_proj_qkv.weight [2·Hk·dk + Hv·dv, C] rows [Q all | K all | V all]
//   in_proj_z.weight [Hv·dv, C]; in_proj_b.weight, in_proj_a.weight [Hv, C]
//   conv1d.weight [2·Hk·dk + Hv·dv, 1, K]; dt_bias [Hv]; A_log [Hv]; norm.weight [dv]
//   out_proj.weight [C, Hv·dv]
// The caller gathers the input rows under sequence parallel and reduces the input gradient, as
// for attention; out_proj's partial sums are reduced here. Under TP each rank holds Hk/TP key
// heads and Hv/TP value heads: in_proj_qkv's and conv1d's rows split section by section
// (ShardSpec::sections), z, b, a, dt_bias, A_log by value head, out_proj by column; the norm's
// gain is replicated.
//
// Under CP (Megatron's GDN context parallelism, Ulysses style: parallel/context_parallel.h) each
// CP rank also owns a 1/CP share of its TP rank's heads: Hk/(TP·CP) key heads and the
// Hv/(TP·CP) value heads that read them. in_proj runs on this rank's rows (its two zigzag chunks)
// for all of the TP rank's heads; one all-to-all (sequence_to_heads) trades them for whole
// sequences, in global order, of this rank's heads, each section q, k, v, z, b, a split by heads
// on its own; the convolution (this rank's channels of conv1d), the l2norms, the gates (its slices
// of A_log, dt_bias), the delta rule and the gated norm run on whole sequences, restarting at each
// packed document; the inverse all-to-all (heads_to_sequence) returns the norm's output to this
// rank's rows for out_proj. The backward moves the gradients the other way round. A rank adds
// gradient only to its own slices of conv1d, A_log, dt_bias: the DP × CP gradient reduction's sum
// over CP is then exactly the whole gradient.
//
// Bytes each rank sends per layer and microbatch, fp32, N = B·T/CP rows (B·T under SP too: the
// input is gathered over TP), key = Hk·dk and value = Hv·dv of this TP rank, (CP−1)/CP of it to
// other ranks: forward N·(2·key + 2·value + 2·Hv)·4 (q, k, v, z, b, a) and N·value·4 (the norm's
// output back), N·(2·key + 3·value + 2·Hv)·4 in all; backward the same amount the other way. The
// seed's 397B (Hk 16, Hv 64, dk = dv 128) under TP 4: 7200 floats a row, 28.8 KB; at T 4096, B 1,
// CP 2: 59 MB forward and 59 MB backward per GDN layer, half of it off the rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessel/model/config.h"
#include "tessel/model/layer.h"
#include "tessel/model/layer_context.h"
#include "tessel/model/recompute.h"
#include "tessel/parallel/context_parallel.h"
#include "tessel/parallel/tensor_parallel.h"

namespace tessel {

class GatedDeltaNet {
 public:
  // N rows (B·T), Hk/Hv key/value heads, dk/dv their dims, conv_dim = 2·Hk·dk + Hv·dv. Under CP:
  // the rows of whole sequences (B·T·CP) for this rank's heads; those marked "this rank's rows"
  // hold B·T rows of the TP rank's heads (CP times as wide), the same number of elements.
  struct Saved {
    Tensor qkv_raw;        // (N, conv_dim) in_proj_qkv's output, the convolution's input
    Tensor qkv;            // (N, conv_dim) silu(conv(qkv_raw)), its q and k l2-normed in place
    Tensor q_rstd, k_rstd; // (N, Hk) each, the l2norms' statistics
    Tensor z;              // (N, Hv·dv) the output gate's input
    Tensor b, a;           // (N, Hv) each, the gates' inputs
    Tensor beta, g;        // (N, Hv) each, sigmoid(b) and the log decay
    Tensor Ainv;           // (B, Hv, chunks, 64, 64) the delta rule's per-chunk inverses
    Tensor core;           // (N, Hv·dv) the delta rule's output
    Tensor norm_rstd;      // (N·Hv) the gated norm's statistics
    Tensor normed;         // (N, Hv·dv) the gated norm's output, out_proj's input: this rank's rows
    Tensor d_qkv_raw, d_z, d_b, d_a;  // the input projections' output gradients: this rank's rows
    Tensor d_out;          // (N, C) out_proj's output gradient, gathered to all rows: this rank's
    PackedRows packed;     // the microbatch's documents, as forward was given them
  };

  // Declares layer `layer`'s GDN weights (Hugging Face's initialisation: normal(0, 0.02), dt_bias
  // 1, A_log log U(0, 16), the gated norm's gain 1) and its scratch in ctx.buffers.scratch.
  GatedDeltaNet(const LayerContext& ctx, int layer);

  // Everything in `r.full`'s list, the output gradients in the weight pass's.
  void list_saved(Saved& s, SavedLists& lists, const LayerRecompute& r) const;
  // out_local (N_l, C) = the mixer's output for in (N, C) (all rows). partial (N, C) is scratch.
  // packed: the rows' documents (the conv and the delta rule restart at each; under CP read from
  // its sequence_key_start).
  void forward(Saved& s, float* out_local, const float* in, float* partial, const PackedRows& packed) const;
  // d_in (N, C) += this rank's part of d(in) from d_out_local (N_l, C). The convolution's, the
  // gates' and the gated norm's weight gradients are finished here.
  void backward_input(Saved& s, float* d_in, const float* d_out_local, const float* in);
  void backward_input(Saved& s, float* d_in, const float* d_out_local, const float* in, ChunkScratch&) {
    backward_input(s, d_in, d_out_local, in);
  }
  void backward_weight(Saved& s, const float* in) const;
  // The gated norm's output (out_proj's input) from the delta rule's output and z: the forward's
  // step, run again for --recompute-modules gdn_norm_out.
  void norm_out_forward(Saved& s) const;
  // What --recompute-modules recomputes of it: the gated norm's output (gdn_norm_out).
  void recompute(Saved& s, const LayerRecompute& r) const {
    if (r.gdn_norm_out) norm_out_forward(s);
  }

  // Incremental decoding of one sequence (infer/decoder.h): what the mixer carries from one
  // position to the next, zeros before the first. Besides, scratch of one decode call.
  struct RecurrentState {
    Tensor history;   // (K−1, conv_dim) the conv's last K−1 inputs (in_proj_qkv's rows)
    Tensor state;     // (Hv, dk, dv) the delta rule's S, fp32
    Tensor window;    // (K−1+T, conv_dim) scratch: the history, then the new rows, the conv's input
    Tensor conv_out;  // (K−1+T, conv_dim) scratch: its output, of which the last rows are new
    Tensor state_in;  // (Hv, dk, dv) scratch: S before a prefill
  };
  using DecodeState = RecurrentState;
  void list_decode_state(RecurrentState& r, TensorList& list) const;
  // out (n, C) = the mixer's output for the n rows in (n, C) that follow the positions r has
  // read; r moves on past them. One row (a decoding step): the recurrent step of the delta rule;
  // more (a prefill): the chunked rule from r's state, which it leaves the final one. s (sized
  // for T rows) is scratch. B = 1, one process (no TP). `start` (the positions read) is r's own
  // business: the recurrence needs no position.
  void decode(Saved& s, RecurrentState& r, float* out, const float* in, int64_t start, int64_t n) const;

  std::vector<int> input_half_params() const;   // conv1d, dt_bias, A_log, norm
  std::vector<int> weight_half_params() const;  // the projections

 private:
  // The projections' sections q, k, v, z, b, a for the heads' all-to-all, in rows that hold
  // `ranks` CP ranks' heads: CP for this rank's rows (every head of the TP rank), 1 for whole
  // sequences (this rank's heads).
  std::vector<CpColumns> sections(float* qkv, float* z, float* b, float* a, int64_t ranks) const;
  // conv1d's rows for this rank's channels (under CP its share of each section, copied together).
  const float* conv_weight() const;
  void add_conv_weight_grad(const float* local) const;
  const int32_t* document_starts(const PackedRows& packed) const;

  const Kernels& k_;
  ParamView params_;
  TensorParallel tp_;
  ContextParallel cp_;
  int64_t B_, T_, N_, C_;
  int64_t P_, Ts_, Ns_;  // CP ranks; whole sequences' rows: T·CP each, B·T·CP in all
  int64_t Hk_, Hv_, dk_, dv_, K_;
  int64_t key_dim_, value_dim_, conv_dim_;
  float eps_;
  int qkv_w_ = -1, z_w_ = -1, b_w_ = -1, a_w_ = -1, conv_w_ = -1, dt_bias_ = -1, A_log_ = -1,
      norm_w_ = -1, out_w_ = -1;
  // Scratch of one backward call: the gradients of the delta rule's q, k (rows of conv_dim, as
  // the rule reads them) and of the conv output; of the gated norm's input and output; of β, g.
  Tensor d_qk_, d_conv_, d_core_, d_normed_, d_beta_, d_g_;
  // Under CP: conv1d's rows of this rank's channels and their gradient (conv_dim, K), rebuilt on
  // each call (the scratch of one call).
  mutable Tensor conv_w_cp_, d_conv_w_cp_;
};

}  // namespace tessel
