// Context parallelism, in one place: the positions of every sequence are split over the CP group
// and attention still sees every earlier token.
//
// Megatron's causal load balance: the sequence (T tokens) is cut into 2·CP chunks of T/(2·CP);
// CP rank i holds chunks i and 2·CP−1−i, in that order, so each rank's rows are
// [chunk i | chunk 2·CP−1−i] and every rank gets the same share of the causal triangle.
//
// Attention (scaled dot product, causal by global position, grouped-query heads as in
// kernels.h) over the local query rows against the keys and values of the whole sequence:
//   p2p (ring):  the K/V blocks of every rank travel around the CP ring with non-blocking
//                send/recv, overlapped with the current block's compute; partial results are
//                merged by log-sum-exp; block pairs are skipped, causal on the diagonal or full,
//                by their global positions. Backward circulates K/V again with their dK/dV
//                accumulators, which end on the rank that owns them.
//   all-gather:  K and V all-gathered, one attention call; dK/dV reduce-scattered back.
//
// Gated DeltaNet layers (Megatron's GDN CP, Ulysses style) do not pass state between ranks: an
// all-to-all trades this rank's rows of every head for whole sequences of a 1/CP share of the heads
// (sequence_to_heads), the layer runs its recurrence on whole sequences, and the inverse all-to-all
// (heads_to_sequence) brings its output back to this rank's rows.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessel/comm/comm.h"
#include "tessel/kernels/kernels.h"

namespace tessel {

enum class CpCommType : uint8_t { P2P, AllGather };
CpCommType parse_cp_comm_type(const std::string& name);  // "p2p" | "all-gather"

struct CpWorkspace;

// One section of rows for the heads' all-to-all: `width` columns per CP rank (one rank's heads ×
// their head dim) from `data`, in rows of stride `ld`.
struct CpColumns {
  float* data;
  int64_t ld;
  int64_t width;
};

struct ContextParallel {
  // `group` (the CP group, a group of one without CP; a place alone in a declare-only build):
  // its communicator must outlive every copy.
  ContextParallel(CommGroup group, CpCommType comm_type, const Kernels& kernels);

  CommGroup group;
  CpCommType comm_type;
  const Kernels* kernels;

  int rank() const { return group.rank(); }
  int size() const { return group.size(); }
  Comm& comm() const { return group.comm(); }
  // The global position of each of this rank's T / CP rows of a sequence of length T.
  std::vector<int32_t> local_positions(int64_t T) const;
  // Copies this rank's rows out of whole sequences: in (B, T, width) -> out (B, T/CP, width).
  void take_local_rows(const int32_t* in, int32_t* out, int64_t B, int64_t T, int64_t width) const;

  // Shapes as kernels.h's attention_forward/backward, with T_l = T / CP local rows per sequence:
  // q rows (B, T_l) of H heads, k and v rows (B, T_l) of G heads, each with its row stride;
  // out (B, T_l, H·D) contiguous, lse (B, H, T_l). Causal by global position. With one CP rank
  // these are exactly the kernels'. Backward accumulates into dq, dk, dv (same layouts as q, k, v).
  // Packed documents: key_start (B, T_l), each row's document's first global position: a row
  // sees only keys from there on (nullptr: one document per sequence). Attention dropout
  // (kernels.h): its samples are the rows' (B, T_l), keyed by global positions on every block.
  void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                         int64_t B, int64_t T_l, int64_t H, int64_t G, int64_t D, int64_t q_ld,
                         int64_t k_ld, int64_t v_ld, const int32_t* key_start = nullptr,
                         const DropoutSite& dropout = {}) const;
  void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                          const float* k, const float* v, const float* out, const float* lse,
                          int64_t B, int64_t T_l, int64_t H, int64_t G, int64_t D, int64_t q_ld,
                          int64_t k_ld, int64_t v_ld, const int32_t* key_start = nullptr,
                          const DropoutSite& dropout = {}) const;

  // `local`: sections over this rank's rows (B, T_l), each of CP·width columns that hold every CP
  // rank's heads in rank order -> `whole`: the same sections over whole sequences (B, T = CP·T_l)
  // in global position order (the load balance undone), only this rank's width columns of each.
  // All sections travel in one all-to-all; a destination may be its source's memory (everything
  // is read before anything is written). heads_to_sequence is the inverse (whole -> local).
  void sequence_to_heads(const std::vector<CpColumns>& local, const std::vector<CpColumns>& whole,
                         int64_t B, int64_t T_l) const;
  void heads_to_sequence(const std::vector<CpColumns>& whole, const std::vector<CpColumns>& local,
                         int64_t B, int64_t T_l) const;

  // One step of the p2p ring's forward, as it ends: the rank whose K/V block was used, that
  // block's partial result alone (block_out (B, T_l, H·D), block_lse (B, H, T_l)) and the result
  // merged over the steps so far (out, lse), all in the backend's memory.
  struct RingStep {
    int step, kv_rank;
    const float* block_out;
    const float* block_lse;
    const float* out;
    const float* lse;
  };
  // Called, when set, after each step of the ring's forward: for showing the ring at work (tessel
  // demo cp), never for computing.
  std::function<void(const RingStep&)> on_ring_step;

  // The buffers of one call, grown on first use and kept (no allocation in later steps); shared
  // by the copies of this object, which run one call at a time.
  std::shared_ptr<CpWorkspace> workspace;
};

// The bytes the workspace grows to over the forward and backward of attention of one shape (the
// arguments of attention_forward) on `cp` ranks: p2p's K/V block held and the one arriving, the
// three gradient accumulators, a block's output and statistics; all-gather's own, gathered and
// global K/V and the global gradient; both, every rank's positions and the keys'.
int64_t context_parallel_workspace_bytes(CpCommType type, int cp, int64_t B, int64_t T_l, int64_t H,
                                         int64_t G, int64_t D);

// The bytes the heads' all-to-all's workspace grows to for sections of `width` columns a rank in
// all over B·T_l rows: the messages sent and those received, CP of B·T_l·width floats each way.
int64_t context_parallel_heads_workspace_bytes(int cp, int64_t B, int64_t T_l, int64_t width);

// The global positions CP rank `rank` of `cp` holds of a sequence of length T (its two chunks).
std::vector<int32_t> context_parallel_positions(int64_t T, int cp, int rank);

// One process, no context parallelism.
ContextParallel no_context_parallel(const Kernels& kernels);

}  // namespace tessel
