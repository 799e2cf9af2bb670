// The decoder-only Transformer, GPT-2 or Llama flavoured, as a pipeline chunk: a contiguous range
// of layers, plus the embedding when it is the first chunk and the final norm, LM head and loss
// when it is the last. One process training alone runs one chunk holding everything.
//
// Forward and backward are explicit (DESIGN invariant 4): forward(acts, ...) fills a
// per-microbatch `ChunkActivations` with exactly what backward needs; backward(acts, ...) reads
// it and accumulates parameter gradients. Whoever runs the microbatch owns its activations, so
// several microbatches can be in flight. Scratch that lives only inside one call is shared.
//
// Backward comes in two halves, as zero-bubble schedules need: backward_input computes
// d(input), saving every linear's output gradient in the microbatch's activations, and
// backward_weight later turns those into the linears' weight and bias gradients. backward runs
// both at once.
//
// Tensor parallelism (parallel/tensor_parallel.h) splits attention heads (and query groups), MLP
// neurons and the (padded) vocabulary over the TP group: q/k/v, up/gate and the LM head are
// column-parallel, the attention output and MLP down projections row-parallel. Sizes below with
// a trailing l are this rank's share; rows are N_l = N/TP under sequence parallel, else N.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "tessel/core/tensor.h"
#include "tessel/model/config.h"
#include "tessel/model/moe.h"
#include "tessel/core/params.h"
#include "tessel/parallel/context_parallel.h"
#include "tessel/parallel/tensor_parallel.h"

namespace tessel {

struct ChunkSpec {
  int first_layer = 0;
  int num_layers = 0;
  bool has_embedding = true;  // first pipeline chunk
  bool has_head = true;       // last pipeline chunk: final norm, LM head, loss
};

// What one layer's backward needs from its forward. Fields a given architecture does not use
// stay empty. N rows (N_l under sequence parallel), C hidden, F_l ffn, H_l/G_l heads, D head dim.
struct LayerActivations {
  Tensor ln1_mean, ln1_rstd;        // (N_l), (N_l)
  Tensor ln1;                       // (N, C) norm output, gathered to all rows
  Tensor qkv;                       // (N, 3·H_l·D) gpt2: fused q|k|v
  Tensor q, k, v;                   // (N, H_l·D), (N, G_l·D), (N, G_l·D) llama, after RoPE
  Tensor q_raw, k_raw;              // (N, H_l·D), (N, G_l·D) --qk-layernorm: q and k before it
  Tensor q_rstd, k_rstd;            // (N·H_l), (N·G_l) --qk-layernorm: each head's 1/rms
  Tensor attn, lse;                 // (N, H_l·D), (B, H_l, T)
  Tensor mid;                       // (N_l, C) residual stream after attention
  Tensor ln2_mean, ln2_rstd, ln2;   // (N_l), (N_l), (N, C); an MoE layer's ln2 (N_l, C)
  Tensor fc, fc_act;                // (N, F_l) gpt2: before and after GELU
  Tensor gate, up, act;             // (N, F_l) llama: SwiGLU inputs and output
  MoeLayer::Saved moe;              // a Mixture-of-Experts layer's routing and expert activations
  // Left by backward_input for backward_weight: the gradient of each linear's output.
  Tensor d_qkv;                     // (N, 3·H_l·D) gpt2
  Tensor d_q, d_k, d_v;             // (N, H_l·D), (N, G_l·D), (N, G_l·D) llama, of the projections
  Tensor d_attn_out;                // (N, C) attention output projection's, gathered to all rows
  Tensor d_fc;                      // (N, F_l) gpt2, before GELU
  Tensor d_gate, d_up;              // (N, F_l) llama
  Tensor d_mlp_out;                 // (N, C) MLP down projection's, gathered to all rows
};

// One microbatch's activations for one chunk.
struct ChunkActivations {
  std::vector<Tensor> resid;             // num_layers + 1 tensors (N_l, C): each layer's input, then the output
  std::vector<LayerActivations> layers;
  Tensor vocab_ids;                      // (N) i32, first chunk: token ids in this rank's vocabulary shard, or -1
  Tensor lnf_mean, lnf_rstd;             // (N_l), (N_l) final norm
  Tensor lnf;                            // (N, C) final norm output, gathered
  Tensor d_lnf;                          // (N_l, C) gradient of the final norm's output
  double loss_sum = 0;                   // Σ of this microbatch's token losses

  int64_t bytes() const;
};

class TransformerChunk {
 public:
  // Declares this chunk's parameters — this TP rank's shards — in `registry` (before
  // registry.finalize()). `tp.comm` and `cp.comm` must outlive the chunk. Under context
  // parallelism each sequence holds this CP rank's seq_length / CP rows (parallel/
  // context_parallel.h), at their global positions.
  // MoE layers (cfg.moe) talk over `moe_groups` (moe.h: EP, ETP, the token group; null groups
  // are one process; its tp is replaced by this chunk's). With TP they need sequence parallel
  // and take this rank's rows.
  // The chunk computes with `k` (kernels/kernels.h); its activations live in k's memory.
  TransformerChunk(const Kernels& k, const ModelConfig& cfg, ChunkSpec spec, int64_t micro_batch,
                   TensorParallel tp, ParamRegistry& registry, ContextParallel cp,
                   MoeGroups moe_groups = {});
  // Points the chunk at parameter memory, after registry.finalize().
  void bind(ParamRegistry& registry) {
    registry_ = &registry;
    for (auto& m : moe_) m->bind(registry);
  }
  // Router statistics summed over this chunk's MoE layers and the forwards since the last reset.
  struct RouterTotals {
    std::vector<double> tokens_per_expert;  // (E) per layer and microbatch, summed
    int64_t dropped = 0;
    double aux_loss = 0, z_loss = 0;        // summed; `forwards` layer-forwards contributed
    int64_t forwards = 0;
  };
  RouterTotals& router_totals() { return router_totals_; }

  // Sized once per microbatch slot and reused every iteration.
  ChunkActivations make_activations() const;

  // First chunk: reads tokens (B, T); others: input (N_l, C) from the previous stage.
  // Last chunk with targets: computes the loss and, when grad_scale > 0, the head's gradient at
  // once (so the (N, V_l) logits are never kept per microbatch); returns Σ token losses.
  // Without targets, logits() holds this rank's (N, V_l) logits afterwards.
  double forward(ChunkActivations& acts, const int32_t* tokens, const float* input,
                 const int32_t* targets, float grad_scale);
  // d_output (N_l, C): gradient of this chunk's output (ignored on the last chunk).
  // d_input (N_l, C): where the gradient of the chunk's input goes (not on the first chunk).
  // grad_ready(index), when given, is called once for every parameter (registry index) as soon
  // as this microbatch's backward has finished adding to its gradient: data parallelism starts
  // reducing there. backward = backward_input, then backward_weight, with the same grad_ready.
  void backward(ChunkActivations& acts, const float* d_output, float* d_input,
                const std::function<void(int)>& grad_ready = {});
  // Everything d(input) needs: the gradients of the activations through every layer, the norms,
  // attention, RoPE and the linears' input-gradient GEMMs. It also finishes the gradients that
  // need no saved output gradient — the norms' weights and biases, the embeddings (first chunk),
  // the LM head (computed by forward) — and reports those to grad_ready. Saves each linear's
  // output gradient in acts for backward_weight; d_input is complete on return.
  void backward_input(ChunkActivations& acts, const float* d_output, float* d_input,
                      const std::function<void(int)>& grad_ready = {});
  // The linears' weight-gradient GEMMs and bias gradients, from what backward_input saved in the
  // same acts (any other microbatches' halves may run in between); reports every linear's weight
  // and bias to grad_ready. No communication. Call once after each backward_input.
  void backward_weight(ChunkActivations& acts, const std::function<void(int)>& grad_ready = {});

  const float* logits() const { return logits_.data(); }
  int64_t vocab_shard_start() const { return vocab_start_; }
  int64_t vocab_shard_size() const { return V_l_; }
  int64_t vocab_shard_valid() const { return V_valid_; }
  const float* output(const ChunkActivations& acts) const { return acts.resid.back().data(); }
  int64_t local_rows() const { return N_l_; }
  int64_t hidden_size() const { return C_; }
  // The registry index of this chunk's copy of a tied embedding that it does not own (a last
  // pipeline stage without the embedding), else -1: kept equal over the embedding group.
  int tied_embedding_copy() const { return spec_.has_head && !spec_.has_embedding ? lm_head_ == wte_ ? wte_ : -1 : -1; }
  // Memory of the scratch shared by all microbatches (logits, backward temporaries, RoPE tables).
  int64_t scratch_bytes() const;

 private:
  // Registry indices of one layer's parameters (-1: not in this architecture).
  struct LayerParams {
    int ln1_w = -1, ln1_b = -1, ln2_w = -1, ln2_b = -1;
    int qkv_w = -1, qkv_b = -1;         // gpt2 c_attn
    int q_w = -1, k_w = -1, v_w = -1;   // llama
    int q_b = -1, k_b = -1, v_b = -1;   // llama --add-qkv-bias
    int q_norm = -1, k_norm = -1;       // llama --qk-layernorm
    int proj_w = -1, proj_b = -1;       // c_proj / o_proj
    int fc_w = -1, fc_b = -1;           // c_fc / up_proj
    int gate_w = -1;                    // llama gate_proj
    int down_w = -1, down_b = -1;       // mlp c_proj / down_proj
    int moe = -1;                       // index into moe_ for a Mixture-of-Experts layer
  };

  void declare_params(ParamRegistry& registry, const MoeGroups& moe_groups);
  void embedding_forward(ChunkActivations& acts, const int32_t* tokens);
  void embedding_backward(ChunkActivations& acts, float* dres);
  void norm_forward(float* out, float* mean, float* rstd, const float* x, int w, int b);
  void norm_backward(float* dx, const float* dout, const float* x, const float* mean,
                     const float* rstd, int w, int b);
  void layer_forward(int l, ChunkActivations& acts);
  void layer_backward_input(int l, ChunkActivations& acts, float* dres);
  void layer_backward_weight(int l, ChunkActivations& acts, const std::function<void(int)>& grad_ready);
  // --qk-layernorm's backward for one layer: d_q and d_k hold the gradients of the normalised
  // q and k on entry and of the raw projections' outputs on exit.
  void qk_norm_backward(LayerActivations& a, const LayerParams& p);
  // The row-parallel output projection's tail: reduce the partial sums in proj_full_ over TP,
  // add the bias, add the residual: out (N_l, C) = x + Σ proj + bias.
  void row_parallel_exit(float* out, const float* x, int bias);
  // Its backward: d(out) (N, C) on all N rows from dres (N_l, C), for the projection's GEMMs
  // (the bias gradient comes later, in backward_weight, from this rank's rows of it).
  void row_parallel_exit_backward(float* d_out, const float* dres);
  double head_forward(ChunkActivations& acts, const int32_t* targets, float grad_scale);
  void head_backward(ChunkActivations& acts, float* dres);

  float* val(int param) const { return param < 0 ? nullptr : registry_->params()[param].value; }
  float* grd(int param) const { return param < 0 ? nullptr : registry_->params()[param].grad; }

  const Kernels& k_;
  ModelConfig cfg_;
  ChunkSpec spec_;
  TensorParallel tp_;
  ContextParallel cp_;
  int64_t B_, T_, N_, N_l_, C_, D_, H_l_, G_l_, F_l_, V_l_, V_valid_, vocab_start_;
  ParamRegistry* registry_ = nullptr;
  std::vector<LayerParams> layers_;
  std::vector<std::unique_ptr<MoeLayer>> moe_;
  float grad_scale_ = 0;  // of the forward in progress (MoE layers scale their auxiliary losses)
  RouterTotals router_totals_;
  int wte_ = -1, wpe_ = -1, lnf_w_ = -1, lnf_b_ = -1, lm_head_ = -1;
  Tensor positions_;                // (N) i32: global position of each row b·T_l + t
  Tensor rope_cos_, rope_sin_;      // (max positions, D/2)
  // Scratch shared by all microbatches: used only inside one forward or backward call.
  Tensor proj_full_, proj_local_;   // (N, C), (N_l, C) row-parallel outputs before / after reduction
  Tensor norm_local_;               // (N_l, C) a norm's output before it is gathered (sequence parallel)
  Tensor rows_full_;                // (N, C) gathered gradient rows (sequence parallel)
  Tensor d_resid_;                  // (N_l, C) the residual gradient of a first chunk
  Tensor d_ln_full_, d_ln_local_;   // (N, C), (N_l, C) a norm output's gradient before / after reduction
  Tensor d_attn_;                   // (N, H_l·D) gradient of the attention output
  Tensor d_act_;                    // (N, F_l) gradient of the MLP's activation output
  Tensor logits_;                   // (N, V_l)
  Tensor loss_stats_;               // (4, N): row max, [Σ exp, target logit] (reduced together), lse
  Tensor row_max_global_;           // (N)
};

}  // namespace tessel
