// The MLP: GELU (GPT-2: c_fc with bias, GELU-tanh, c_proj with bias; Conv1D [in, out] weights)
// or SwiGLU (Llama/Qwen: down(silu(gate(x)) · up(x)); nn.Linear [out, in] weights), split over
// its F neurons: the first linears column-parallel (this rank's F_l rows of neurons), the down
// projection row-parallel (their columns), so the product is a partial sum over this rank's
// neurons. The same class is the dense MLP (split over TP), the MoE's shared expert (over TP) and
// each routed expert (over ETP, its partial sums reduced by the dispatcher).
//
// The caller owns the column-parallel entry (gathering the input rows under sequence parallel,
// reducing the input gradient); the MLP owns the row-parallel exit (reducing its partial sums
// over TP, adding the down bias once; gathering the output gradient).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "tessel/model/layer.h"
#include "tessel/parallel/tensor_parallel.h"

namespace tessel {

// GELU exact (erf, Megatron's default) or by its tanh approximation (--openai-gelu, GPT-2's), or SwiGLU.
enum class Activation : uint8_t { Gelu, GeluTanh, SwiGlu };

// The buffers of one MLP pass over M rows, F = this rank's neurons.
struct MlpRows {
  float* hidden;    // (M, F) GELU: the first linear's output; SwiGLU: the gate
  float* up;        // (M, F) SwiGLU only
  float* act;       // (M, F) the activation's output
  float* d_hidden;  // (M, F) left by backward_input for backward_weight
  float* d_up;      // (M, F) SwiGLU only
  float* d_out;     // (M, C) the down projection's output gradient
};

class Mlp {
 public:
  struct Saved {
    Tensor hidden, up, act, d_hidden, d_up;  // (M, F_l)
    Tensor d_out;                            // (M, C)
    MlpRows rows() {
      return {hidden.data(), up.data(), act.data(), d_hidden.data(), d_up.data(), d_out.data()};
    }
  };
  // The shard spec of a weight whose neurons run along dimension `dim`.
  using Split = std::function<ShardSpec(int dim)>;

  // What an MLP is: where its weights are named, its activation, its width C, its F neurons (F_l
  // of them on this rank, `split` giving each weight its shard) and its down projection's
  // initialisation.
  struct Spec {
    std::string prefix;
    Activation activation = Activation::SwiGlu;
    int64_t C = 0, F = 0, F_l = 0;
    Split split;
    float in_std = 0;   // the first projections' initial std (--init-method-std)
    float out_std = 0;  // the down projection's
  };

  // Declares the weights under spec.prefix with Hugging Face's names (GELU: c_fc.weight [C, F],
  // c_fc.bias, c_proj.weight [F, C], c_proj.bias; SwiGLU: gate_proj.weight, up_proj.weight
  // [F, C], down_proj.weight [C, F]). Initialised normal(0, in_std), the down projection
  // normal(0, out_std).
  Mlp(const Kernels& k, ParamRegistry& registry, const Spec& spec);

  // The hidden activations (hidden, up, act) to `activations`, the output gradients to
  // `gradients` (the same list, or the recompute lists' choice: model/layer.h); `role` names them
  // ("MLP", "shared expert").
  void list_saved(Saved& s, TensorList& activations, TensorList& gradients, int64_t M,
                  const std::string& role) const;

  // With tensor parallelism (tp: the group the neurons are split over). in (M, C) all rows;
  // out_local (M_l, C) = Σ over TP of the partial products + the down bias, this rank's rows.
  // partial (M, C) is scratch (unused with one TP rank: the product goes straight to out_local).
  void forward(Saved& s, float* out_local, const float* in, int64_t M, const TensorParallel& tp,
               float* partial) const;
  // d_out_local (M_l, C) gathered into s.d_out; d_in (M, C) += this rank's part of d(in) (the
  // caller reduces it over TP). d_act (M, F_l) is scratch.
  void backward_input(Saved& s, float* d_in, const float* d_out_local, const float* in, int64_t M,
                      const TensorParallel& tp, float* d_act) const;
  void backward_weight(Saved& s, const float* in, int64_t M, const TensorParallel& tp) const;

  // The same without communication, over given rows (the routed experts' grouped pass):
  // out (M, C) = the partial product; d_in (M, C) += d(in) from rows.d_out; the weight
  // gradients from rows.d_out and rows.d_hidden (rows.d_up).
  void forward_rows(const MlpRows& rows, float* out, const float* in, int64_t M) const;
  // The forward up to the down projection: rows.hidden (rows.up) and rows.act from in (M, C).
  // Run again for a recomputed MLP (--recompute-modules mlp, shared_experts).
  void hidden_forward(const MlpRows& rows, const float* in, int64_t M) const;
  void backward_input_rows(const MlpRows& rows, float* d_in, const float* in, int64_t M,
                           float* d_act) const;
  void backward_weight_rows(const MlpRows& rows, const float* in, int64_t M) const;

  // Registry indices in declaration (Hugging Face) order.
  std::vector<int> param_indices() const;
  int down_bias() const { return down_b_; }

 private:
  const Kernels& k_;
  ParamView params_;
  Activation activation_;
  WeightLayout layout_;
  int64_t C_, F_l_;
  int fc_w_ = -1, fc_b_ = -1, up_w_ = -1, down_w_ = -1, down_b_ = -1;  // fc = GELU's c_fc or the gate
};

}  // namespace tessel
