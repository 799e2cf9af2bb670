// Mixture of Experts, split as Megatron-Core's transformer/moe/: the MLP of chosen layers
// replaced by E expert MLPs (SwiGLU, as Qwen-MoE) and a router that sends each token to its top-k
// experts (router.h), the token dispatch over expert parallelism (dispatch.h: all-to-all, or
// allgather_dispatch.h: all-gather, as --moe-token-dispatcher-type chooses), the grouped
// experts (experts.h), and optionally a shared expert every token goes through (model/mlp.h;
// with --moe-shared-expert-gate scaled by a sigmoid gate, as Qwen2-MoE and Qwen3-Next). This layer composes them and keeps the router statistics.
//
// Hugging Face names (Qwen2-MoE / Qwen3-MoE), N the layer:
//   model.layers.N.mlp.gate.weight [E, C]                         the router
//   model.layers.N.mlp.experts.e.{gate_proj,up_proj}.weight [F_e, C], .down_proj.weight [C, F_e]
//   model.layers.N.mlp.shared_expert.{gate_proj,up_proj}.weight [F_s, C], .down_proj [C, F_s]
//   model.layers.N.mlp.shared_expert_gate.weight [1, C]           shared output · sigmoid(x·gateᵀ)
//                                                                 (--moe-shared-expert-gate)
// Hugging Face's Qwen2-MoE (norm_topk_prob false) routes as --moe-router-pre-softmax; Qwen3-MoE
// (norm_topk_prob true) as the default, top-k then softmax (the same weights).
//
// Expert parallelism, as Megatron's: EP is carved out of data parallelism, so every EP rank
// routes its own microbatch's tokens. The layer produces local gradients only; the trainer
// reduces expert gradients over the expert-data-parallel group (edp) and the router's and the
// shared expert's over DP×CP like every dense parameter, and the global gradient norm sums
// expert gradients over ETP×EP (is_expert_param tells them apart).
//
// With tensor parallelism (always with sequence parallel, as Megatron asserts) each TP rank
// routes its own N/TP rows; the router and shared_expert_gate are replicated over TP (their
// gradients, from this rank's rows, are summed over TP by parallel/grad_sync), and the shared expert is
// Megatron's SharedExpertMLP: its rows gathered over TP, gate/up column-parallel and down
// row-parallel, the output reduce-scattered back to this rank's rows. Expert tensor parallelism
// (--expert-tensor-parallel-size, ETP) splits every routed expert as the dense MLP over the ETP
// group (whose ranks hold the same experts); ETP 1 keeps experts whole.
#pragma once

#include <cstdint>
#include <optional>
#include <variant>
#include <vector>

#include "tessel/comm/comm.h"
#include "tessel/model/config.h"
#include "tessel/model/layer.h"
#include "tessel/model/layer_context.h"
#include "tessel/model/mlp.h"
#include "tessel/model/moe/allgather_dispatch.h"
#include "tessel/model/moe/dispatch.h"
#include "tessel/model/moe/experts.h"
#include "tessel/model/moe/router.h"
#include "tessel/model/recompute.h"
#include "tessel/parallel/tensor_parallel.h"

namespace tessel {

// A routed expert's parameter (held by one EP rank), as opposed to a dense or replicated one.
inline bool is_expert_param(const Param& p) { return p.shard.expert(); }

// Whether one microbatch's rows are split over ranks that route them as one token group: TP under
// sequence parallel, and CP (MoeGroups::token_group, then Megatron's tp_cp group).
inline bool moe_rows_split(const TensorParallel& tp, int cp) {
  return (tp.sequence_parallel && tp.size() > 1) || cp > 1;
}

// Router statistics summed over the forwards since they were last taken.
struct RouterTotals {
  std::vector<double> tokens_per_expert;  // (E) per layer-forward, summed
  int64_t dropped = 0;
  double aux_loss = 0, z_loss = 0;        // summed; `forwards` layer-forwards contributed
  int64_t forwards = 0;

  void add(const RouterTotals& other);
};

class MoeLayer {
 public:
  // What the backward of one microbatch needs (N: rows this rank routed; N_g = N·TP the shared
  // expert's gathered rows). The dispatched and expert rows grow to the largest load seen:
  // dropless routing cannot know in advance how many rows reach a rank.
  struct Saved {
    int64_t N = 0;
    float grad_scale = 0;  // the forward's, for a recompute
    const int32_t* sample_ids = nullptr;  // the forward's, for a recompute
    TopKRouter::Saved routing;
    std::variant<TokenDispatcher::Saved, AllGatherDispatcher::Saved> dispatch;  // the dispatcher's
    GroupedExperts::Saved experts;
    Mlp::Saved shared;      // over N_g rows, F_s/TP neurons
    Tensor shared_in;       // (N_g, C) the gathered input (TP > 1 only)
    Tensor shared_out;      // (N, C) this rank's rows of the shared expert's output
    Tensor shared_scale;    // (N) sigmoid(x · shared_expert_gateᵀ)
    Tensor d_shared_logit;  // (N) left by backward_input
    RouterStats stats;

    // The buffers that grow with the routing load (not carved from a slot's allocation).
    int64_t growing_bytes() const;
  };

  // Declares layer `layer`'s parameters (this EP rank's experts only, their ETP slices, this TP
  // rank's slice of the shared expert) in ctx.registry, before its finalize(), with the settings
  // of ctx.cfg.moe (`moe` below) over ctx's TP and MoE groups (with TP > 1 the layer takes this
  // rank's rows, sequence parallel). Expert size: moe.ffn_hidden_size, or the model's ffn_size()
  // when 0. Initialisation as Megatron: normal(0, 0.02), down projections 0.02/sqrt(2·layers).
  // max_tokens (this rank's rows) sizes the buffers, declared in ctx.buffers (layer.h: the
  // caller allocates them). Throws tessel::Error for
  // settings that break MoeConfig::violations, for TP > 1 without sequence parallel, and for
  // sizes that do not split over TP or ETP. `recompute` (model/recompute.h): the whole layer
  // (full, moe) keeps its activations in one Saved of its own that all microbatches share (in
  // buffers.shared); moe_act the experts' activation output; shared_experts the shared expert's
  // hidden activations.
  MoeLayer(const LayerContext& ctx, int layer, int64_t max_tokens, LayerRecompute recompute = {});
  // After registry.finalize(): the registry the layer declared into.
  void bind(const ParamRegistry& registry) const;

  // What a microbatch keeps, or leaves to the memory its recomputation shares (model/layer.h);
  // nothing when the whole layer is recomputed.
  void list_saved(Saved& s, SavedLists& lists) const;
  // A Saved of its own (one allocation), for running the layer alone.
  Saved make_saved() const;

  // out (N, C) = the MoE block's output for this rank's rows x (N, C), N ≤ max_tokens (not the
  // residual; overwrites out). Collective over the EP, ETP and token groups (and TP with a shared
  // expert): every rank calls it, whatever its N, zero included; under TP all TP ranks' N agree.
  //
  // Loss accounting: the auxiliary losses are means over this microbatch's tokens, as Megatron's;
  // their contribution to the training objective is their mean over the global batch's
  // microbatches. With grad_scale = 1/(tokens in the global batch), the same scale the main loss
  // uses, and T = the microbatch's tokens (N, or N summed over the token group), backward adds the
  // gradient of T · grad_scale · (aux + z). Returns T · (aux + z): added to the microbatch's sum
  // of token losses, it is the part of the loss sum whose gradient backward adds (saved.stats
  // has the two losses apart, for the logs). sample_ids: the router's (TopKRouter::forward), valid
  // until the backward.
  double forward(Saved& s, float* out, const float* x, int64_t N, float grad_scale,
                 const int32_t* sample_ids = nullptr);
  // dx (N, C) += d(x) from dout (N, C); x is the same input forward read. Collective, like
  // forward. Computes every input gradient and leaves each linear's output gradient in s for
  // backward_weight; adds to no parameter gradient.
  void backward_input(Saved& s, float* dx, const float* dout, const float* x);
  // The weight gradients of the router, the local experts and the shared expert (accumulated),
  // from what backward_input left in s; no communication. ready(index) is called for each of the
  // layer's parameters (registry indices) once its gradient is final.
  void backward_weight(Saved& s, const float* x, const GradReady& ready = {});
  // Both halves.
  void backward(Saved& s, float* dx, const float* dout, const float* x,
                const GradReady& ready = {});
  // Before backward_input of a recomputing layer: its forward again (the whole layer, with out
  // (N, C) scratch; or the experts' activations; or the shared expert's hidden activations),
  // from the same x, leaving the router statistics alone. Collective like forward when whole.
  void recompute(Saved& s, float* out, const float* x);

  int64_t num_local_experts() const {
    return std::visit([](const auto& d) { return d.local_experts(); }, dispatcher_);
  }
  int64_t first_local_expert() const {
    return std::visit([](const auto& d) { return d.first_expert(); }, dispatcher_);
  }
  // Registry indices of all this layer's parameters, in declaration (Hugging Face) order.
  std::vector<int> param_indices() const;
  // Memory of the recomputed activations all microbatches share (recompute), as held now.
  int64_t shared_activation_bytes() const;
  // The router statistics of the forwards since the last call; starts new ones.
  RouterTotals take_router_totals();

 private:
  // The forward into s (the microbatch's, or the shared one when recomputed whole); its losses.
  double run_forward(Saved& s, float* out, const float* x, int64_t N, float grad_scale,
                     const int32_t* sample_ids);
  void list_all(Saved& s, SavedLists& lists) const;
  Saved& state(Saved& s) { return whole_ ? shared_saved_ : s; }
  // f(dispatcher, its Saved in s): the layer's steps are the same for every dispatcher.
  template <class F>
  decltype(auto) with_dispatcher(Saved& s, F&& f) {
    return std::visit(
        [&](auto& d) -> decltype(auto) {
          return f(d, std::get<typename std::decay_t<decltype(d)>::Saved>(s.dispatch));
        },
        dispatcher_);
  }
  void shared_forward(Saved& s, float* out, const float* x);
  void shared_backward_input(Saved& s, float* dx, const float* dout, const float* x);
  const float* shared_input(const Saved& s, const float* x) const {
    return tp_.size() > 1 ? s.shared_in.data() : x;
  }

  const Kernels& k_;
  const ParamRegistry& registry_;
  ParamView params_;
  int64_t C_, E_, F_s_, F_sl_, topk_, etp_size_, max_tokens_;
  TensorParallel tp_;
  TopKRouter router_;
  std::variant<TokenDispatcher, AllGatherDispatcher> dispatcher_;  // ctx.moe.dispatcher's
  GroupedExperts experts_;
  std::optional<Mlp> shared_;
  int shared_gate_ = -1;  // mlp.shared_expert_gate.weight (-1: an ungated shared expert)
  RouterTotals totals_;
  LayerRecompute recompute_;
  bool whole_ = false;         // the whole layer recomputed: shared_saved_ holds its activations
  Saved shared_saved_;
  int64_t shared_saved_bytes_ = 0;
  // Scratch shared by all microbatches, used only inside one call; grows like Saved's buffers.
  Tensor expert_out_;                  // (R, C) the experts' outputs, then their input gradient
  Tensor d_act_;                       // (max(R, N_g), max(F_l, F_s/TP))
  Tensor d_probs_;                     // (N, k)
  Tensor shared_full_, shared_local_;  // (N_g, C), (N, C) the shared expert's before/after TP sum
};

}  // namespace tessel
