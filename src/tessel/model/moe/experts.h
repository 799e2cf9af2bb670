// The routed experts of one MoE layer held by this rank: E_l SwiGLU MLPs (model/mlp.h), each
// split over the expert-tensor-parallel group like the dense MLP (gate/up by rows of F, down by
// columns), run as one grouped pass over their rows in expert order (each expert's rows
// contiguous). Outputs are partial sums over ETP, reduced by the dispatcher.
//
// Hugging Face names (Qwen2-MoE / Qwen3-MoE): model.layers.N.mlp.experts.e.{gate_proj,up_proj}
// .weight [F_e, C], .down_proj.weight [C, F_e]. Each expert is its own parameter, held by one
// EP rank (ShardSpec expert_rank): its gradient is reduced over expert-DP only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessel/model/layer_context.h"
#include "tessel/model/mlp.h"

namespace tessel {

class GroupedExperts {
 public:
  // The R rows this rank's experts compute, in expert order; they grow with the routing load.
  struct Saved {
    Tensor in;                     // (R, C)
    Tensor gate, up, act;          // (R, F_l)
    Tensor d_gate, d_up, d_out;    // (R, F_l) ×2, (R, C): left by backward_input
  };

  // The rows the buffers are first sized for: R (the padded rows, or a balanced load's), and
  // how many of them a balanced load brings.
  struct Rows {
    int64_t first = 0;
    int64_t balanced = 0;
  };
  // This EP rank's experts (ctx.moe.ep: E / EP of them from rank · E / EP on) of layer prefix
  // `prefix` (…mlp.), F neurons each (ctx.cfg.moe's expert size) of which this ETP rank holds
  // F / ETP (ctx.moe.etp). With `shared_act` (--recompute-modules moe_act) the activation output
  // lives in one buffer all microbatches share (declared in ctx.buffers.shared), recomputed by
  // recompute_act before each backward.
  GroupedExperts(const LayerContext& ctx, const std::string& prefix, Rows rows, bool shared_act);

  // Sized for R rows; Saved grows past that on first need.
  void list_saved(Saved& s, TensorList& buffers) const;
  // y (R, C) = each expert's MLP over its rows of s.in; rows[e] rows per local expert.
  void forward(Saved& s, float* y, const std::vector<int64_t>& rows, int64_t R);
  // d_in (R, C) = d(s.in) from s.d_out (overwrites). d_act (max rows, F_l) is scratch.
  void backward_input(Saved& s, float* d_in, const std::vector<int64_t>& rows, int64_t R,
                      float* d_act);
  void backward_weight(Saved& s, const std::vector<int64_t>& rows);
  // The activation output of the R rows again, from s.gate and s.up (shared_act only).
  void recompute_act(Saved& s, int64_t R);
  int64_t shared_bytes() const { return held_bytes(act_shared_); }

  int64_t ffn_local() const { return F_l_; }
  // Registry indices, expert by expert in Hugging Face order.
  std::vector<int> param_indices() const;

 private:
  // Expert e's rows from row `first` of s on.
  MlpRows rows_of(Saved& s, int64_t first);
  Tensor& act(Saved& s) { return shared_act_ ? act_shared_ : s.act; }

  const Kernels& k_;
  int64_t C_, F_l_, R_, balanced_;
  std::vector<Mlp> experts_;
  bool shared_act_;
  Tensor act_shared_;  // (R, F_l), grows like Saved's
};

}  // namespace tessel
