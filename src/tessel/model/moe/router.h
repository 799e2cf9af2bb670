// Megatron-LM's TopKRouter (the kernels in kernels/cpu/router.cpp): the router's logits, the
// top-k choice (softmax or sigmoid scores, --moe-router-pre-softmax), the switch load-balancing
// loss and the z-loss, and the capacity drop (Megatron's "probs" policy). Tie-breaking is
// deterministic: the lower expert index, then the lower token index, wins.
//
// The rows of one microbatch may be split over a token group (TP under sequence parallel, CP:
// Megatron's tp_cp group): the load-balancing loss counts the group's tokens, as Megatron's; the
// capacity drop gathers the group's choices and drops over the whole microbatch, as one process
// would (DESIGN invariant 1; Megatron drops per rank against a per-rank capacity instead).
//
// --moe-router-force-load-balancing (Megatron's RandomSTE, router.py and moe_utils.py): the logits
// are standard normal values instead of the gate's output, and everything after them — the
// top-k, the load-balancing loss and the z-loss — reads the random ones; their gradient is taken
// as the gate output's (straight through), so the gate weight and the input still get one. The
// values are keyed by (seed, layer, the token's sample and position, expert): every layout draws
// the same, evaluation included (Megatron draws them there too).
#pragma once

#include <cstdint>
#include <string>

#include "tessel/comm/comm.h"
#include "tessel/model/config.h"
#include "tessel/model/layer.h"
#include "tessel/model/layer_context.h"

namespace tessel {

// Megatron's get_capacity for N tokens and top-k: ceil(N · k / E · factor), at most N (an expert
// can take each token once).
int64_t moe_expert_capacity(int64_t N, int64_t E, int64_t k, double factor);

// The routed rows a rank of N tokens sends, as its MoE buffers are first sized: padded to a
// capacity, exactly E blocks of the capacity of the G ranks' token group that decides the drop,
// so the buffers never grow; else N·k, a balanced load's (the routing may bring more, and the
// buffers grow through Kernels::reserve). A buffer sized short and grown leaves its first
// allocation behind as a hole in the heap, which stays in the process's resident memory.
int64_t moe_first_routed_rows(int64_t N, const MoeConfig& moe, int G);

class TopKRouter {
 public:
  // One microbatch's routing of N rows (at most the layer's max_tokens).
  struct Saved {
    int64_t N = 0;
    Tensor logits;                  // (N, E)
    Tensor experts;                 // (N, k) i32 chosen experts, best first
    Tensor probs;                   // (N, k) their routing weights
    Tensor aux_scores, aux_counts;  // (N, E), (E) with the load-balancing loss
    int64_t aux_tokens = 0;         // its T: N summed over the token group
    Tensor lse;                     // (N) with the z-loss
    Tensor d_logits;                // (N, E) left by backward_input
    int64_t capacity = 0;           // rows per expert, of the whole microbatch (token group)
    float aux_grad_scale = 0;       // d(objective)/d(aux + z-loss)
    double aux_loss = 0, z_loss = 0;  // this rank's losses (each already times its coeff)
  };

  // Declares layer `layer`'s mlp.gate.weight [E, C] with ctx.cfg.moe's settings, and its scratch in
  // ctx.buffers.scratch; the load-balancing counts and the capacity's drop over ctx.moe.token_group.
  TopKRouter(const LayerContext& ctx, int layer, int64_t max_tokens);

  void list_saved(Saved& s, TensorList& buffers) const;
  // Routes x (N, C): s.experts, s.probs, the losses, and keep() (the capacity's verdicts).
  // grad_scale: the main loss's scale (1 / tokens of the global batch); the auxiliary losses'
  // gradient is T · grad_scale · d(aux + z), T = the microbatch's tokens over the token group.
  // sample_ids: (chunk rows) each row's sample in the run, which keys the random logits of
  // --moe-router-force-load-balancing (throws without them then). Returns T.
  int64_t forward(Saved& s, const float* x, int64_t N, float grad_scale, const int32_t* sample_ids);
  // (N·k) i32 of the last forward: 1 where the assignment survived the capacity.
  const int32_t* keep() const { return keep_.ints(); }
  // s.d_logits from d_probs (N, k) and the auxiliary losses; dx (N, C) += d(x).
  void backward_input(Saved& s, float* dx, const float* d_probs, const float* x) const;
  void backward_weight(Saved& s, const float* x) const;

  int weight() const { return weight_; }

 private:
  void logits_forward(Saved& s, const float* x, const int32_t* sample_ids);
  void drop_over_capacity(Saved& s);
  float z_coeff() const;
  RouterScore score() const { return moe_.score_sigmoid ? RouterScore::Sigmoid : RouterScore::Softmax; }

  const Kernels& k_;
  ParamView params_;
  MoeConfig moe_;
  int64_t C_, E_, topk_, max_tokens_;
  CommGroup token_group_;
  DropoutKeys keys_;           // the random logits' seed and this rank's row positions
  uint32_t random_site_ = 0;   // and their site word (router_rows::random_logits_site)
  int weight_ = -1;
  // Scratch of one forward: the verdicts, the counts for the load-balancing loss, and (with a
  // capacity, over a token group of G > 1 ranks) the group's choices (G·N·k each) for the drop.
  Tensor keep_, group_counts_;
  Tensor choices_, group_choices_, group_experts_, group_probs_, group_keep_;
};

}  // namespace tessel
