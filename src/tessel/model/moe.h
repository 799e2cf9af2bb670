// Mixture of Experts: the MLP of chosen layers replaced by E expert MLPs (SwiGLU, as Qwen-MoE)
// and a router that sends each token to its top-k experts; optionally a shared expert every
// token goes through. Expert parallelism splits the experts over the EP group: tokens travel to
// the ranks holding their experts by all-to-all(v) (counts first, then tokens), the local experts
// run as one grouped pass, and the results travel back to be combined with their weights.
//
// Hugging Face names (Qwen2-MoE / Qwen3-MoE), N the layer:
//   model.layers.N.mlp.gate.weight [E, C]                         the router
//   model.layers.N.mlp.experts.e.{gate_proj,up_proj}.weight [F_e, C], .down_proj.weight [C, F_e]
//   model.layers.N.mlp.shared_expert.{gate_proj,up_proj}.weight [F_s, C], .down_proj [C, F_s]
//   model.layers.N.mlp.shared_expert_gate.weight [1, C]           shared output · sigmoid(x·gateᵀ)
//
// Routing follows Megatron-LM's TopKRouter (the kernels in kernels/cpu/router.cpp): softmax or
// sigmoid scores, top-k with --moe-router-pre-softmax, the switch load-balancing loss and the
// z-loss, dropless or with a capacity (Megatron's "probs" drop policy). Tie-breaking is
// deterministic: the lower expert index, then the lower token index, wins. Hugging Face's
// Qwen2-MoE (norm_topk_prob false) routes as --moe-router-pre-softmax; Qwen3-MoE
// (norm_topk_prob true) as the default, top-k then softmax (the same weights).
//
// Expert parallelism, as Megatron's: EP is carved out of data parallelism, so every EP rank
// routes its own microbatch's tokens; rank r of the EP group holds experts
// [r·E/EP, (r+1)·E/EP). Each expert is its own parameter, so a rank declares only its experts',
// marked ShardSpec{expert_rank r, expert_ranks EP}. The layer produces local gradients only; the
// trainer reduces expert gradients over the expert-data-parallel group (edp) and the router's and
// shared expert's over DP×CP like every dense parameter, and the global gradient norm sums expert
// gradients over ETP×EP (is_expert_param below tells them apart).
//
// With tensor parallelism (always with sequence parallel, as Megatron asserts) each TP rank
// routes its own N/TP rows; the router and shared_expert_gate are replicated over TP (their
// gradients, from this rank's rows, are summed over TP by the trainer), and the shared expert is
// Megatron's SharedExpertMLP: its rows gathered over TP, gate/up column-parallel and down
// row-parallel, the output reduce-scattered back to this rank's rows. Expert tensor parallelism
// (--expert-tensor-parallel-size, ETP) splits every routed expert as the dense MLP: gate/up by
// rows of F, down by columns, over the ETP group (whose ranks hold the same experts). As
// Megatron's all-to-all dispatcher, the rows an ETP rank receives from the EP all-to-all are
// all-gathered over ETP, each ETP rank computes its F/ETP slice for all of them, and the partial
// outputs are reduce-scattered back to the ETP rank that received them. ETP 1 keeps experts whole.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tessel/comm/comm.h"
#include "tessel/core/tensor.h"
#include "tessel/model/config.h"
#include "tessel/core/params.h"
#include "tessel/kernels/kernels.h"
#include "tessel/parallel/tensor_parallel.h"

namespace tessel {

// --moe-layer-freq as Megatron reads it: an interval k (layers 0, k, 2k, ... are MoE) or a
// num_layers-long pattern of 0/1, as a list "[1,0,1,0]" or Python's "([1]*3+[0]*1)*2".
// Throws tessel::Error naming the problem.
std::vector<int> parse_moe_layer_freq(const std::string& text, int num_layers);

// Megatron's get_capacity for N tokens and top-k: ceil(N · k / E · factor), at most N (an expert
// can take each token once).
int64_t moe_expert_capacity(int64_t N, int64_t E, int64_t k, double factor);

// A routed expert's parameter (held by one EP rank), as opposed to a dense or replicated one.
inline bool is_expert_param(const Param& p) { return p.shard.expert(); }

// The groups an MoE layer talks over; a null group is one process.
struct MoeGroups {
  Comm* ep = nullptr;   // expert parallel: the experts are split over it
  Comm* etp = nullptr;  // expert tensor parallel: each expert's F is split over it
  // The ranks holding parts of the same sequences (TP under sequence parallel, × CP: Megatron's
  // tp_cp group): the load-balancing loss counts tokens over it, as Megatron's.
  Comm* token_group = nullptr;
  // Dense tensor parallelism, with sequence parallel when TP > 1: the layer takes this rank's
  // rows and splits the shared expert over TP. No comm: one process.
  TensorParallel tp;
};

// Router statistics of one forward, for the logs.
struct RouterStats {
  std::vector<double> tokens_per_expert;  // (E) assignments kept after dropping, summed over EP
  int64_t dropped = 0;                    // assignments dropped by the capacity, summed over EP
  double aux_loss = 0, z_loss = 0;        // this rank's losses (each already times its coeff)
};

class MoeLayer {
 public:
  // What the backward of one microbatch needs, filled by forward (N: rows this rank routed,
  // S: rows it dispatched, R: rows its experts compute, received by the ETP group's ranks;
  // F_l = F/ETP this rank's neurons of each expert, F_s the shared expert size). Buffers whose size depends on the routing grow to the largest seen, then are reused:
  // dropless routing cannot know in advance how many rows will reach a rank.
  struct Saved {
    int64_t N = 0;
    float aux_grad_scale = 0;      // d(objective)/d(aux + z-loss), see forward
    Tensor logits;                 // (N, E)
    Tensor experts;                // (N, k) i32 chosen experts, best first
    Tensor probs;                  // (N, k) their routing weights
    Tensor slot_row;                // (N·k) i32 each assignment's row in dispatch order; -1 dropped
    int64_t capacity = 0;           // rows per expert, of the whole microbatch (token group)
    Tensor aux_scores, aux_counts;  // (N, E), (E) with the load-balancing loss
    int64_t aux_tokens = 0;         // its T: N summed over the token group
    Tensor lse;                     // (N) with the z-loss
    // Dispatch plan: send_rows[r] rows go to EP rank r. The experts' rows are those every ETP
    // rank received (ETP 1: this rank's), each ETP rank's in turn: block (j, s, e) = rows that
    // ETP rank j received from EP rank s for local expert e, at block_src[(j·EP + s)·E_l + e]
    // in arrival order (by ETP rank, then source) and block_dst[...] in expert order
    // (expert_rows[e] rows per local expert, contiguous). etp_rows[j] rows came to ETP rank j.
    std::vector<int64_t> send_rows, block_rows, block_src, block_dst, expert_rows, etp_rows;
    int64_t rows_out = 0, rows_in = 0;  // S, R (over the ETP group)
    int64_t rows_own = 0, own_offset = 0;  // this rank's etp_rows and where they start in R
    Tensor combined;                    // (S, C) expert outputs back here, in dispatch order
    Tensor expert_in, gate, up, act;    // (R, C), (R, F_l) x3: the experts' inputs, expert order
    Tensor d_expert_out, d_gate, d_up;  // (R, C), (R, F_l) x2: left by backward_input
    // Shared expert over the N_g = N·TP gathered rows (N without TP): shared_in (N_g, C) the
    // gathered input (TP > 1 only), (N_g, F_s/TP) x3, shared_out (N, C) this rank's rows of its
    // output, shared_scale (N) = sigmoid(x · shared_expert_gateᵀ).
    Tensor shared_in, shared_gate, shared_up, shared_act, shared_out, shared_scale;
    // Left by backward_input: (N_g, C), (N_g, F_s/TP) x2, (N); d_logits (N, E).
    Tensor d_shared_out, d_shared_gate, d_shared_up, d_shared_logit, d_logits;
    RouterStats stats;

    int64_t bytes() const;
  };

  // Declares layer `layer`'s parameters (this EP rank's experts only, their ETP slices, this TP
  // rank's slice of the shared expert) in `registry`, before registry.finalize(). Expert size:
  // moe.ffn_hidden_size, or model.ffn_size() when 0. Initialisation as Megatron: normal(0,
  // 0.02), down projections 0.02/sqrt(2·layers). max_tokens (this rank's rows) sizes the
  // buffers. Throws tessel::Error for settings that break MoeConfig::violations, for TP > 1
  // without sequence parallel, and for sizes that do not split over TP or ETP.
  MoeLayer(const Kernels& k, const ModelConfig& model, const MoeConfig& moe, int layer,
           int64_t max_tokens, const MoeGroups& groups, ParamRegistry& registry);
  // Points the layer at parameter memory, after registry.finalize().
  void bind(ParamRegistry& registry) { registry_ = &registry; }

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
  // has the two losses apart, for the logs).
  double forward(Saved& saved, float* out, const float* x, int64_t N, float grad_scale);
  // dx (N, C) += d(x) from dout (N, C); x is the same input forward read. Collective, like
  // forward. Computes every input gradient and leaves each linear's output gradient in saved for
  // backward_weight; adds to no parameter gradient.
  void backward_input(Saved& saved, float* dx, const float* dout, const float* x);
  // The weight gradients of the router, the local experts and the shared expert (accumulated),
  // from what backward_input left in saved; no communication. grad_ready(index) is called for
  // each of the layer's parameters (registry indices) once its gradient is final.
  void backward_weight(Saved& saved, const float* x,
                       const std::function<void(int)>& grad_ready = {});
  // Both halves.
  void backward(Saved& saved, float* dx, const float* dout, const float* x,
                const std::function<void(int)>& grad_ready = {});

  int64_t num_local_experts() const { return E_l_; }
  int64_t first_local_expert() const { return first_expert_; }
  // Registry indices of all this layer's parameters, in declaration (Hugging Face) order.
  std::vector<int> param_indices() const;
  // Memory of the scratch shared by all microbatches.
  int64_t scratch_bytes() const;

 private:
  struct ExpertParams {
    int gate = -1, up = -1, down = -1;
  };

  // Router, auxiliary losses, top-k and capacity drop; returns T, the microbatch's tokens.
  int64_t route(Saved& s, const float* x);
  void experts_forward(Saved& s);
  void experts_backward_input(Saved& s, const float* d_y, float* d_in);
  void shared_forward(Saved& s, float* out, const float* x);
  void shared_backward_input(Saved& s, float* dx, const float* dout, const float* x);
  const float* shared_input(const Saved& s, const float* x) const {
    return tp_.size() > 1 ? s.shared_in.data() : x;
  }
  float z_coeff() const;
  int64_t capacity(int64_t N) const;
  // The capacity drop over the whole microbatch's choices: sets s.capacity and keep_.
  void drop_over_capacity(Saved& s);

  // The dispatch (moe_dispatch.cpp). plan_dispatch: where every kept assignment goes, and what
  // arrives from where (counts travel first, over EP and then ETP).
  void plan_dispatch(Saved& s);
  // Rows between dispatch order (S, this rank's copies by expert) and the experts' rows (R, in
  // arrival order): to_experts takes them there by the EP all-to-all and the ETP all-gather and
  // returns R's buffer; from_experts sums the ETP ranks' partial results of each row and takes it
  // back to the rank that dispatched it, into recv (S, C).
  float* to_experts(const Saved& s, const float* send);
  void from_experts(const Saved& s, const float* rows, float* recv);
  // Moves the R rows between arrival order and expert order.
  void to_expert_order(const Saved& s, float* dst, const float* src) const;
  void to_arrival_order(const Saved& s, float* dst, const float* src) const;
  // The element counts and offsets of the EP all-to-all (forward: S rows out, R_own in).
  void row_counts(const Saved& s);

  float* val(int param) const { return registry_->params()[param].value; }
  float* grd(int param) const { return registry_->params()[param].grad; }

  const Kernels& k_;
  MoeConfig moe_;
  int64_t C_, F_, F_l_, F_s_, F_sl_, E_, topk_, E_l_, first_expert_, max_tokens_;
  int P_, ep_rank_, Q_, etp_rank_;  // EP and ETP sizes and this rank's place in them
  Comm* ep_;
  Comm* etp_;
  Comm* token_group_;
  TensorParallel tp_;
  ParamRegistry* registry_ = nullptr;
  int router_ = -1;
  std::vector<ExpertParams> experts_;  // this rank's E_l experts (their ETP slices)
  ExpertParams shared_;
  int shared_gate_ = -1;  // mlp.shared_expert_gate.weight
  // Scratch shared by all microbatches, used only inside one call; grows like Saved's buffers.
  Tensor send_, arrival_, expert_rows_;  // (S, C), (R, C) arrival order, (R, C) expert order
  Tensor own_rows_;                      // (R_own, C) this rank's rows, summed over ETP
  Tensor d_act_;                         // (max(R, N_g), max(F_l, F_s/TP))
  Tensor d_probs_;                       // (N, k)
  Tensor shared_full_, shared_local_;    // (N_g, C), (N, C) the shared expert's before/after TP sum
  std::vector<int64_t> counts_out_, counts_in_, offsets_out_, offsets_in_;  // (EP) each
  std::vector<int64_t> etp_counts_, etp_offsets_;                            // (ETP) each
  Tensor keep_;                       // (N·k) i32 1: the assignment survived the capacity
  // The token group's choices (G·N·k each) for the capacity drop: gathered [experts | probs]
  // blocks, then apart, and every assignment's verdict.
  Tensor group_choices_, choices_, group_experts_, group_probs_, group_keep_;
  Tensor row_cursor_;                 // (E) i32: the next free row of each expert's block
  std::vector<int32_t> first_rows_;   // (E) row_cursor_'s start, on the host
  Tensor group_counts_;               // (E + 1) top-k counts and N, summed over the token group
  Tensor count_buffer_;               // (E + ETP·EP·E_l) row counts out, in over ETP
  std::vector<float> host_counts_;    // count_buffer_ on the host
  std::vector<double> stats_buffer_;  // (E + 1)
};

}  // namespace tessel
