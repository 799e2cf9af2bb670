// The MoE layer's token dispatch, as Megatron's MoEAlltoAllTokenDispatcher: where every routed
// row goes, the all-to-all(v) over EP that takes the rows to the ranks holding their experts and
// back, and with expert tensor parallelism the all-gather of the received rows over ETP and the
// reduce-scatter of the experts' partial results. (The other dispatcher, Megatron's all-gather:
// allgather_dispatch.h.)
//
// Rank r of the EP group holds experts [r·E/EP, (r+1)·E/EP). Dispatch order groups a rank's
// kept rows by expert (so by destination rank), tokens in order within an expert, each expert's
// block padded to the capacity when asked. The experts' rows are those every ETP rank received
// (ETP 1: this rank's), each ETP rank's in turn; "expert order" regroups them by local expert.
#pragma once

#include <cstdint>
#include <vector>

#include "tessel/comm/comm.h"
#include "tessel/model/layer.h"
#include "tessel/model/layer_context.h"
#include "tessel/model/moe/router.h"

namespace tessel {

// Router statistics of one forward, for the logs.
struct RouterStats {
  std::vector<double> tokens_per_expert;  // (E) assignments kept after dropping, summed over EP
  int64_t dropped = 0;                    // assignments dropped by the capacity, summed over EP
  double aux_loss = 0, z_loss = 0;        // this rank's losses (each already times its coeff)
};

class TokenDispatcher {
 public:
  // One microbatch's plan (N rows routed here, S rows dispatched, R rows the experts compute).
  struct Saved {
    Tensor slot_row;  // (N·k) i32 each assignment's row in dispatch order; -1 dropped
    // send_rows[r] rows go to EP rank r. Block (j, s, e) = rows that ETP rank j received from EP
    // rank s for local expert e, at block_src[(j·EP + s)·E_l + e] in arrival order and
    // block_dst[...] in expert order (expert_rows[e] rows per local expert, contiguous);
    // etp_rows[j] rows came to ETP rank j.
    std::vector<int64_t> send_rows, block_rows, block_src, block_dst, expert_rows, etp_rows;
    int64_t rows_out = 0, rows_in = 0;     // S, R (over the ETP group)
    int64_t rows_own = 0, own_offset = 0;  // this rank's etp_rows and where they start in R
    Tensor combined;  // (S, C) the experts' outputs back here, in dispatch order (grows)
  };

  // Over ctx.moe's EP and ETP groups (a group of one without expert parallelism), with
  // ctx.cfg.moe's experts, top-k and padding. max_tokens: the rows this rank routes at most;
  // routed_rows: the rows it sends as the buffers are first sized (moe_first_routed_rows).
  // Declares its scratch in ctx.buffers.scratch.
  TokenDispatcher(const LayerContext& ctx, int64_t max_tokens, int64_t routed_rows);

  void list_saved(Saved& s, TensorList& buffers) const;
  // Where every kept assignment of the N rows goes (routing's experts, and capacity the padded
  // block size; keep (N·k) i32 from the router); the counts travel first over EP and ETP. Fills
  // stats.tokens_per_expert and stats.dropped, summed over EP.
  void plan(Saved& s, const TopKRouter::Saved& routing, const int32_t* keep, int64_t N, RouterStats& stats);
  // x (N, C) → the experts' input rows in expert order, expert_in (R, C).
  void dispatch(Saved& s, float* expert_in, const float* x, int64_t N);
  // dx (N, C) += the rows' gradients d_expert_in (R, C, expert order) brought back.
  void dispatch_backward(const Saved& s, float* dx, const float* d_expert_in, int64_t N);
  // The experts' outputs y (R, C, expert order: partial sums over ETP) → out (N, C) =
  // Σ_j probs[n, j] · (expert j's output for row n). probs (N, k).
  void combine(Saved& s, float* out, const float* y, const float* probs, int64_t N);
  // d_probs (N, k) and the experts' output gradient d_y (R, C, expert order) from dout (N, C).
  void combine_backward(const Saved& s, float* d_probs, float* d_y, const float* dout,
                        const float* probs, int64_t N);

  int64_t local_experts() const { return E_l_; }
  int64_t first_expert() const { return first_expert_; }

 private:
  float* to_experts(const Saved& s, const float* send);
  void from_experts(const Saved& s, const float* rows, float* recv);
  void to_expert_order(const Saved& s, float* dst, const float* src) const;
  void to_arrival_order(const Saved& s, float* dst, const float* src) const;
  void row_counts(const Saved& s);
  float* send_buffer(const Saved& s);

  const Kernels& k_;
  int64_t C_, E_, topk_, E_l_, first_expert_, max_tokens_, routed_rows_;
  bool pad_;
  CommGroup ep_;
  CommGroup etp_;
  int P_, Q_, etp_rank_;  // EP and ETP sizes and this rank's ETP place
  // Scratch of one call; grows with the routing load.
  Tensor send_, arrival_, own_rows_;  // (S, C), (R, C) arrival order, (R_own, C) summed over ETP
  Tensor row_cursor_;                 // (E) i32: the next free row of each expert's block
  Tensor count_buffer_;               // (E + ETP·EP·E_l) row counts out, in over ETP
  std::vector<int32_t> first_rows_;   // (E) row_cursor_'s start, on the host
  std::vector<float> host_counts_;    // count_buffer_ on the host
  std::vector<double> kept_;          // (E + 1) kept per expert, then the dropped
  std::vector<int64_t> counts_out_, counts_in_, offsets_out_, offsets_in_;  // (EP) each
  std::vector<int64_t> etp_counts_, etp_offsets_;                            // (ETP) each
};

}  // namespace tessel
