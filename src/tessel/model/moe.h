// Mixture of Experts: the MLP of chosen layers replaced by E expert MLPs (SwiGLU, as Qwen-MoE)
// and a router that sends each token to its top-k experts; optionally a shared expert every
// token goes through. Expert parallelism splits the experts over the EP group: tokens travel to
// the ranks holding their experts by all-to-all(v) (counts first, then tokens), the local experts
// run as one grouped pass, and the results travel back to be combined with their weights.
//
// Hugging Face names (Qwen2-MoE / Qwen3-MoE): model.layers.N.mlp.gate.weight [E, C] (the
// router), model.layers.N.mlp.experts.e.{gate_proj,up_proj}.weight [F_e, C],
// ...experts.e.down_proj.weight [C, F_e]; shared expert: mlp.shared_expert.{gate,up,down}_proj
// .weight and mlp.shared_expert_gate.weight [1, C] (its output scaled by sigmoid(x·gate)).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tessel/comm/comm.h"
#include "tessel/core/tensor.h"
#include "tessel/model/params.h"

namespace tessel {

struct MoeConfig {
  int num_experts = 0;               // --num-experts (0: dense model)
  int topk = 2;                      // --moe-router-topk
  int ffn_hidden_size = 0;           // --moe-ffn-hidden-size (0: the dense ffn size)
  std::vector<int> layer_pattern;    // --moe-layer-freq: 1 = MoE layer, 0 = dense (empty: all MoE)
  int shared_expert_size = 0;        // --moe-shared-expert-intermediate-size (0: none)
  bool score_sigmoid = false;        // --moe-router-score-function sigmoid (default softmax)
  bool pre_softmax = false;          // --moe-router-pre-softmax
  float aux_loss_coeff = 0.0f;       // --moe-aux-loss-coeff
  float z_loss_coeff = 0.0f;         // --moe-z-loss-coeff
  float capacity_factor = 0.0f;      // --moe-expert-capacity-factor (0: dropless)
  bool pad_to_capacity = false;      // --moe-pad-expert-input-to-capacity
};

// Router statistics of one forward, for the logs.
struct RouterStats {
  std::vector<int64_t> tokens_per_expert;  // (E) assignments after dropping, summed over EP
  int64_t dropped = 0;
  double aux_loss = 0, z_loss = 0;
};

class MoeLayer {
 public:
  // Declares the layer's parameters (its EP rank's experts only) under `prefix`
  // ("model.layers.N.mlp."); `ep` is the expert-parallel group, experts split evenly over it.
  MoeLayer(const MoeConfig& moe, int64_t hidden, const std::string& prefix, int64_t max_tokens,
           Comm& ep, ParamRegistry& registry);
  void bind(ParamRegistry& registry) { registry_ = &registry; }

  // Everything the backward of one microbatch needs; sized by make_saved(), reused.
  struct Saved;
  std::unique_ptr<Saved> make_saved() const;

  // out (N, C) = the MoE block's output for x (N, C) (not including the residual). The auxiliary
  // losses' gradients are scaled by `aux_grad_scale` (the same 1 / tokens as the main loss, so
  // they are means over the global batch as Megatron's); returns the aux + z loss value added to
  // this microbatch's loss sum.
  double forward(Saved& saved, float* out, const float* x, int64_t N, float aux_grad_scale);
  // dx (N, C) += d(x) from dout (N, C); accumulates parameter gradients.
  void backward(Saved& saved, float* dx, const float* dout, int64_t N);

  const RouterStats& stats() const;
};

}  // namespace tessel
