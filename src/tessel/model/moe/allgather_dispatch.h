// The MoE layer's token dispatch as Megatron's MoEAllGatherTokenDispatcher
// (--moe-token-dispatcher-type allgather, Megatron's default): every rank of the ETP × EP group
// (Megatron's tp_ep group, G ranks) gathers all the group's routed rows, runs its local experts on
// the assignments routed to them, and combines their outputs, weighted by the routing
// probabilities, into a partial row for every gathered token; the reduce-scatter over the group
// sums each token's partial rows back on the rank that routed it. Backward mirrors it: the output
// gradient all-gathered, the probabilities' and the input rows' gradients reduce-scattered.
//
// Gathered order: the group's ranks in turn, each rank's rows in order (N_g rows in all). Each
// rank slots its own kept assignments in its dispatch order (expert by expert, tokens in order,
// as the all-to-all's, unpadded) and the slots travel with the rows; a source's block (r, e) =
// its rows for local expert e. Expert order: local expert by local expert, each one's blocks in
// source order (R rows, what the experts compute). Every ETP rank of an expert gathers the same
// rows and computes partial sums over its slice of F, which the same reduce-scatter completes.
// The capacity's drops are the router's; padding to the capacity is the all-to-all's (as in
// Megatron, whose all-gather dispatcher does not pad: a padded row adds nothing to any output).
#pragma once

#include <cstdint>
#include <vector>

#include "tessel/comm/comm.h"
#include "tessel/model/layer.h"
#include "tessel/model/layer_context.h"
#include "tessel/model/moe/dispatch.h"
#include "tessel/model/moe/router.h"

namespace tessel {

class AllGatherDispatcher {
 public:
  // One microbatch's plan (N rows routed here, N_g gathered, R rows the experts compute).
  struct Saved {
    Tensor slot_row;  // (N_g·k) i32 each gathered assignment's row in its source's dispatch order; -1 dropped
    Tensor probs;     // (N_g·k) the gathered routing probabilities
    Tensor combined;  // (R, C) the experts' outputs in expert order, partial over ETP (grows)
    std::vector<int64_t> rank_rows, rank_first;  // (G) the rows each rank of the group routed, the first's place
    // Block (r, e) = source r's rows for local expert e: block_rows[r·E_l + e] of them, at
    // block_src[...] in r's dispatch order and block_dst[...] in expert order.
    std::vector<int64_t> block_rows, block_src, block_dst;
    std::vector<int64_t> expert_rows;  // (E_l) rows per local expert
    int64_t rows_gathered = 0, rows_in = 0;  // N_g, R
  };

  // Over ctx.moe's tp_ep group (EP for the statistics), with ctx.cfg.moe's experts and top-k.
  // max_tokens: the rows any rank of the group routes at most. Declares its scratch in
  // ctx.buffers.scratch.
  AllGatherDispatcher(const LayerContext& ctx, int64_t max_tokens);

  void list_saved(Saved& s, TensorList& buffers) const;
  // Slots this rank's kept assignments (routing's experts; keep (N·k) i32 from the router) and
  // gathers every rank's counts, slots and probabilities. Fills stats.tokens_per_expert and
  // stats.dropped, summed over EP.
  void plan(Saved& s, const TopKRouter::Saved& routing, const int32_t* keep, int64_t N, RouterStats& stats);
  // x (N, C) → the experts' input rows in expert order, expert_in (R, C).
  void dispatch(Saved& s, float* expert_in, const float* x, int64_t N);
  // dx (N, C) += the rows' gradients d_expert_in (R, C, expert order), summed over the group.
  void dispatch_backward(const Saved& s, float* dx, const float* d_expert_in, int64_t N);
  // The experts' outputs y (R, C, expert order: partial sums over ETP) → out (N, C) =
  // Σ_j probs[n, j] · (expert j's output for row n).
  void combine(Saved& s, float* out, const float* y, const float* probs, int64_t N);
  // d_probs (N, k) and the experts' output gradient d_y (R, C, expert order) from dout (N, C).
  void combine_backward(const Saved& s, float* d_probs, float* d_y, const float* dout,
                        const float* probs, int64_t N);

  int64_t local_experts() const { return E_l_; }
  int64_t first_expert() const { return first_expert_; }

 private:
  // src (N, per_row) of every rank → dst (N_g, per_row), in gathered order.
  void gather(const Saved& s, float* dst, const float* src, int64_t per_row);
  // Each rank's share of src (N_g, per_row), summed over the group → dst (N, per_row).
  void reduce_scatter(const Saved& s, float* dst, const float* src, int64_t per_row);
  // Source r's dispatch-order rows (zero where another rank's experts' would be) from this rank's
  // rows in expert order, and back.
  float* source_rows(const Saved& s, int r, const float* expert_rows);
  void to_expert_order(const Saved& s, int r, float* expert_rows, const float* source) const;

  const Kernels& k_;
  int64_t C_, E_, topk_, E_l_, first_expert_, max_tokens_, etp_size_;
  CommGroup group_;  // ETP × EP
  CommGroup ep_;
  int G_;
  // Scratch of one call.
  Tensor rows_;        // (N_g, C) gathered rows: the input, the partial outputs, their gradients
  Tensor own_rows_;    // (N, C) this rank's input gradient, summed over the group
  Tensor source_, d_source_;  // (N·k, C) each: one source's rows in its dispatch order, their gradient
  Tensor own_slots_;   // (N·k) i32 this rank's slots
  Tensor cursor_;      // (E) i32 each expert's next row in this rank's dispatch order
  Tensor choices_;     // (2·N_g·k) [slots as floats | probs] of each rank in turn; then d_probs
  Tensor counts_;      // (E + 1) this rank's kept rows per expert and N, then (G·(E + 1)) every rank's
  std::vector<float> host_counts_;       // (G·(E + 1))
  std::vector<int32_t> host_first_;      // (E)
  std::vector<double> kept_;             // (E + 1) kept per expert, then the dropped
  std::vector<int64_t> counts_v_, offsets_v_;  // (G) each, in elements
};

}  // namespace tessel
