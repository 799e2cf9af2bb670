// Self-attention: GPT-2's fused c_attn (q|k|v with biases, [in, out]) or Llama's q/k/v
// projections (grouped-query: G key/value heads; Qwen2's q/k/v biases with --add-qkv-bias;
// Qwen3's per-head RMSNorm of q and k with --qk-layernorm; RoPE, on the first --rotary-percent of
// each head's dims; Qwen3-Next's output gate with --attention-output-gate: q_proj's rows per head
// [q_h | g_h], the core attention's output times sigmoid(g) before o_proj), the core attention through
// context parallelism (parallel/context_parallel.h: causal by global position, a ring of K/V
// blocks under CP), and the output projection. Heads (and query groups) are split over TP: q,
// k, v column-parallel, the output projection row-parallel (its partial sums reduced over TP,
// its bias added once). With fewer query groups G than TP ranks (Qwen3.5-397B: 2 under TP 4) each
// group is replicated on TP/G ranks (the ranks of its query heads): k_proj and v_proj are still
// split evenly over TP, each rank all-gathers them and computes its group's k and v, and the
// weights' gradients from every rank are reduce-scattered back (each replica's share summed).
// The caller gathers the input rows under sequence parallel and reduces the input gradient, as
// for the MLP.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tessel/model/config.h"
#include "tessel/model/layer.h"
#include "tessel/model/layer_context.h"
#include "tessel/model/norm.h"
#include "tessel/model/recompute.h"
#include "tessel/parallel/context_parallel.h"
#include "tessel/parallel/tensor_parallel.h"

namespace tessel {

class Attention {
 public:
  // N rows (B·T_l), H_l / G_l this rank's heads and query groups, D head dim.
  struct Saved {
    Tensor qkv;             // (N, 3·H_l·D) gpt2: fused q|k|v
    Tensor q, k, v;         // (N, H_l·D), (N, G_l·D) ×2 llama, after RoPE
    Tensor q_raw, k_raw;    // (N, H_l·D), (N, G_l·D) --qk-layernorm: before it
    Norm::Saved q_norm, k_norm;  // (N·H_l), (N·G_l) --qk-layernorm
    Tensor attn, lse;       // (N, H_l·D), (B, H_l, T_l)
    Tensor gate, gated;     // (N, H_l·D) each, --attention-output-gate: g, and attn · sigmoid(g)
    Tensor d_gate;          // (N, H_l·D) g's gradient, left by backward_input
    Tensor d_qkv;           // (N, 3·H_l·D) gpt2: left by backward_input
    Tensor d_q, d_k, d_v;   // llama: the projections' output gradients
    Tensor d_out;           // (N, C) the output projection's, gathered to all rows
    PackedRows packed;      // the microbatch's documents, as forward was given them
  };

  // Declares layer `layer`'s attention weights (this TP rank's heads). It reads ctx's row
  // positions and, for llama, its RoPE tables (model/layer_context.h), shared with the chunk.
  Attention(const LayerContext& ctx, int layer);

  // The projections' outputs and the core attention's in `r`'s choice of lists (model/recompute.h):
  // all recomputed under full recompute, the statistics under core_attn, the output gradients
  // whenever the layer's weight gradients run inside backward_input.
  void list_saved(Saved& s, SavedLists& lists, const LayerRecompute& r) const;
  // out_local (N_l, C) = the attention block's output for in (N, C) (all rows), bias included.
  // partial (N, C) is scratch. packed: the rows' documents (RoPE by their positions, attention
  // within them).
  void forward(Saved& s, float* out_local, const float* in, float* partial,
               const PackedRows& packed) const;
  // The core attention from s's q, k, v: its output s.attn and statistics s.lse. The forward's
  // last step but the output projection; run again for --recompute-modules core_attn.
  void core_forward(Saved& s) const;
  // d_in (N, C) += this rank's part of d(in) (reduced over TP by the caller) from d_out_local
  // (N_l, C). d_heads (N, H_l·D) is scratch. The QK-norm weights' gradients are finished here.
  // d_attn (N, H_l·D) is scratch too, with --attention-output-gate.
  void backward_input(Saved& s, float* d_in, const float* d_out_local, const float* in,
                      float* d_heads, float* d_attn) const;
  // The same with the layer's scratch (model/block.h's mixer members).
  void backward_input(Saved& s, float* d_in, const float* d_out_local, const float* in,
                      ChunkScratch& scratch) const {
    backward_input(s, d_in, d_out_local, in, scratch.d_heads.data(), scratch.d_attn.data());
  }
  void backward_weight(Saved& s, const float* in) const;
  // What --recompute-modules recomputes of it: the core attention (core_attn).
  void recompute(Saved& s, const LayerRecompute& r) const {
    if (r.core_attn) core_forward(s);
  }

  // Incremental decoding of one sequence (infer/decoder.h): the keys — after QK-norm and RoPE —
  // and values of the positions read so far, up to T_l (the context). GPT-2's are its fused
  // q | k | v rows, whose k and v parts the core attention reads in place.
  struct KvCache {
    Tensor qkv;   // (T_l, 3·H·D) gpt2
    Tensor k, v;  // (T_l, G·D) each, llama
  };
  using DecodeState = KvCache;
  void list_decode_state(KvCache& c, TensorList& list) const;
  // out (n, C) = the attention block's output for the n rows in (n, C) at positions
  // start … start+n−1 of the sequence whose first `start` keys and values c holds; c takes theirs.
  // s (sized for T_l rows) is scratch. B = 1, one process (no TP, no CP).
  void decode(Saved& s, KvCache& c, float* out, const float* in, int64_t start, int64_t n) const;

  // The weights backward_input finishes (QK-norm), and those backward_weight does.
  std::vector<int> input_half_params() const;
  std::vector<int> weight_half_params() const;

 private:
  void qk_norm_backward(Saved& s, float* d_normed) const;
  // With the output gate, q_proj's rows interleave per head [q_h | g_h]: q and g are its two
  // halves of D rows per head, one GEMM each (kernel table's gemm with leading dimensions).
  void gated_q_forward(float* q, float* gate, const float* in, int64_t rows) const;
  void gated_q_backward_input(float* d_in, const float* d_q, const float* d_gate) const;
  void gated_q_backward_weight(const float* d_q, const float* d_gate, const float* in) const;
  // k_proj's or v_proj's weight (and bias: nullptr without) for this rank's query groups: its own
  // slice, or with replicated groups the rows of its group in the TP-gathered weights.
  struct KvWeights {
    const float* weight;
    const float* bias;
  };
  KvWeights kv_weights(int weight, int bias, int which) const;
  // With replicated groups: dW (and db) += d_outᵀ · in for the group's rows, summed over TP into
  // this rank's slice. Else the plain linear_backward of the weight.
  void kv_backward_weight(int weight, int bias, const float* d_out, const float* in) const;
  // The o_proj input: the gated output, or the core attention's.
  const float* proj_input(const Saved& s) const { return gated_ ? s.gated.data() : s.attn.data(); }
  // The positions RoPE rotates by: each row's in its document, or in the sequence.
  const int32_t* rope_positions(const Saved& s) const {
    return s.packed.position_ids != nullptr ? s.packed.position_ids : positions_.ints();
  }
  // The dropout of the forward's attention probabilities (--attention-dropout; none without the
  // rows' samples), keyed by this rank's first query head.
  DropoutSite probs_dropout(const Saved& s) const {
    if (attention_dropout_ <= 0 || s.packed.sample_ids == nullptr) return {};
    return {.p = attention_dropout_, .seed = seed_, .site = dropout_site(layer_, DropoutKind::AttentionProbs),
            .samples = s.packed.sample_ids, .positions = nullptr, .feature_offset = tp_.rank() * H_l_};
  }

  const Kernels& k_;
  ParamView params_;
  TensorParallel tp_;
  ContextParallel cp_;
  bool fused_;  // gpt2
  bool gated_;  // --attention-output-gate
  WeightLayout layout_;
  int64_t B_, T_, N_, C_, D_, rot_, H_l_, G_l_;  // rot_: the dims RoPE rotates of D
  int64_t G_;           // all query groups
  int64_t kv_replicas_;  // TP ranks per query group (1: the groups split over TP)
  // With replicated groups: k and v's gathered weights and biases (2, G·D, C), (2, G·D) (forward
  // uses both at once), and one full-size gradient (G·D, C), (G·D) reduce-scattered at a time
  // (and the slice it lands in). Scratch of one call,
  // written by the const forward and backward passes.
  mutable Tensor kv_w_full_, kv_b_full_, d_kv_w_full_, d_kv_b_full_, d_kv_w_local_, d_kv_b_local_;
  Tensor positions_, rope_cos_, rope_sin_;
  int layer_;
  float attention_dropout_;  // --attention-dropout
  uint64_t seed_;
  int qkv_w_ = -1, qkv_b_ = -1;  // gpt2 c_attn
  int q_w_ = -1, k_w_ = -1, v_w_ = -1, q_b_ = -1, k_b_ = -1, v_b_ = -1;  // llama
  int proj_w_ = -1, proj_b_ = -1;  // c_proj / o_proj
  std::optional<Norm> q_norm_, k_norm_;  // --qk-layernorm
};

}  // namespace tessel
