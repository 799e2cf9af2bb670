// The decoder-only Transformer, GPT-2 or Llama flavoured, as a pipeline chunk: a contiguous range
// of layers, plus the embedding when it is the first chunk and the final norm, LM head and loss
// when it is the last. One process training alone runs one chunk holding everything.
//
// Forward and backward are explicit (DESIGN invariant 4): forward(acts, ...) fills a
// per-microbatch `ChunkActivations` with exactly what backward needs; backward(acts, ...) reads
// it and accumulates parameter gradients. Whoever runs the microbatch owns its activations, so
// several microbatches can be in flight. Scratch that lives only inside one call is shared.
#pragma once

#include <cstdint>
#include <vector>

#include "tessel/core/tensor.h"
#include "tessel/model/config.h"
#include "tessel/model/params.h"

namespace tessel {

struct ChunkSpec {
  int first_layer = 0;
  int num_layers = 0;
  bool has_embedding = true;  // first pipeline chunk
  bool has_head = true;       // last pipeline chunk: final norm, LM head, loss
};

// What one layer's backward needs from its forward. Fields a given architecture does not use
// stay empty. N = micro_batch · seq rows, C hidden, F ffn, H/G query/kv heads, D head dim.
struct LayerActivations {
  Tensor ln1, ln1_mean, ln1_rstd;  // (N, C), (N), (N)
  Tensor qkv;                      // (N, 3C) gpt2: fused q|k|v
  Tensor q, k, v;                  // (N, H·D), (N, G·D), (N, G·D) llama, after RoPE
  Tensor attn, lse;                // (N, H·D), (B, H, T)
  Tensor mid;                      // (N, C) residual stream after attention
  Tensor ln2, ln2_mean, ln2_rstd;  // (N, C), (N), (N)
  Tensor fc, fc_act;               // (N, F) gpt2: before and after GELU
  Tensor gate, up, act;            // (N, F) llama: SwiGLU inputs and output
};

// One microbatch's activations for one chunk.
struct ChunkActivations {
  std::vector<Tensor> resid;              // num_layers + 1 tensors (N, C): each layer's input, then the output
  std::vector<LayerActivations> layers;
  std::vector<int32_t> tokens;            // (N) first chunk: the embedding's backward needs them
  Tensor lnf, lnf_mean, lnf_rstd;         // (N, C), (N), (N) final norm
  Tensor d_lnf;                           // (N, C) gradient of the final norm's output
  double loss_sum = 0;                    // Σ of this microbatch's token losses

  int64_t bytes() const;
};

class TransformerChunk {
 public:
  // Declares this chunk's parameters in `registry` (before registry.finalize()).
  TransformerChunk(const ModelConfig& cfg, ChunkSpec spec, int64_t micro_batch,
                   ParamRegistry& registry);
  // Points the chunk at parameter memory, after registry.finalize().
  void bind(ParamRegistry& registry) { registry_ = &registry; }

  // Sized once per microbatch slot and reused every iteration.
  ChunkActivations make_activations() const;

  // First chunk: reads tokens (B, T); others: input (N, C) from the previous stage.
  // Last chunk with targets: computes the loss and, when grad_scale > 0, the head's gradient at
  // once (so the (N, V) logits are never kept per microbatch); returns Σ token losses.
  // Without targets, logits() holds the (N, V) logits afterwards.
  double forward(ChunkActivations& acts, const int32_t* tokens, const float* input,
                 const int32_t* targets, float grad_scale);
  // d_output (N, C): gradient of this chunk's output (ignored on the last chunk).
  // d_input (N, C): where the gradient of the chunk's input goes (not on the first chunk).
  void backward(ChunkActivations& acts, const float* d_output, float* d_input);

  const float* logits() const { return logits_.data(); }
  const float* output(const ChunkActivations& acts) const { return acts.resid.back().data(); }
  int64_t rows() const { return N_; }
  // Memory of the scratch shared by all microbatches (logits, backward temporaries, RoPE tables).
  int64_t scratch_bytes() const;

 private:
  // Registry indices of one layer's parameters (-1: not in this architecture).
  struct LayerParams {
    int ln1_w = -1, ln1_b = -1, ln2_w = -1, ln2_b = -1;
    int qkv_w = -1, qkv_b = -1;         // gpt2 c_attn
    int q_w = -1, k_w = -1, v_w = -1;   // llama
    int proj_w = -1, proj_b = -1;       // c_proj / o_proj
    int fc_w = -1, fc_b = -1;           // c_fc / up_proj
    int gate_w = -1;                    // llama gate_proj
    int down_w = -1, down_b = -1;       // mlp c_proj / down_proj
  };

  void declare_params(ParamRegistry& registry);
  void layer_forward(int l, ChunkActivations& acts);
  void layer_backward(int l, ChunkActivations& acts, float* dres);
  double head_forward(ChunkActivations& acts, const int32_t* targets, float grad_scale);
  void head_backward(ChunkActivations& acts, float* dres);

  ModelConfig cfg_;
  ChunkSpec spec_;
  int64_t B_, T_, N_, C_, F_, H_, G_, D_, V_;
  float* val(int param) const { return param < 0 ? nullptr : registry_->params()[param].value; }
  float* grd(int param) const { return param < 0 ? nullptr : registry_->params()[param].grad; }

  ParamRegistry* registry_ = nullptr;
  std::vector<LayerParams> layers_;
  int wte_ = -1, wpe_ = -1, lnf_w_ = -1, lnf_b_ = -1, lm_head_ = -1;
  std::vector<int32_t> positions_;  // (N) position of each row: t for row b·T + t
  Tensor rope_cos_, rope_sin_;      // (max positions, D/2)
  // Scratch shared by all microbatches: used only inside one forward or backward call.
  Tensor proj_, d_resid_, d_ln_, d_attn_, d_qkv_, d_q_, d_k_, d_v_, d_hidden_, d_hidden2_, d_act_;
  Tensor logits_, losses_, loss_lse_;  // (N, V), (N), (N)
};

}  // namespace tessel
