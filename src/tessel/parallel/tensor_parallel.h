// Tensor parallelism's communication, in one place (Megatron's conjugate pairs f/g), for a
// model that splits attention heads, MLP neurons and the vocabulary over the TP group.
//
// Rows are the flattened (B·T) tokens. Without sequence parallel every TP rank holds all N rows
// of the residual stream; with it, rank r holds the contiguous block of N/TP rows starting at
// r·N/TP, and the TP regions gather the rows on entry and reduce-scatter them on exit.
//
//   entering a column-parallel region:  forward gather_rows  | backward reduce_rows
//   leaving a row-parallel region:      forward reduce_rows  | backward gather_rows
//
// gather_rows: all-gather under sequence parallel, else nothing (the rows are already whole).
// reduce_rows: sums the TP ranks' partial results — reduce-scatter under sequence parallel,
// all-reduce otherwise. With one TP rank both are copies at most.
#pragma once

#include <cstdint>

#include "tessel/comm/comm.h"
#include "tessel/kernels/kernels.h"

namespace tessel {

struct TensorParallel {
  CommGroup group;  // the TP group (a place without a communicator in a declare-only build)
  bool sequence_parallel = false;
  const Kernels* kernels = nullptr;  // the backend whose memory the rows live in

  int rank() const { return group.rank(); }
  int size() const { return group.size(); }
  Comm& comm() const { return group.comm(); }
  // Rows of the residual stream this rank holds, out of N.
  int64_t local_rows(int64_t N) const { return sequence_parallel ? N / size() : N; }
  // The first of them.
  int64_t first_row(int64_t N) const { return sequence_parallel ? rank() * (N / size()) : 0; }

  // full (N, C) from local (local_rows, C). full may equal local (then nothing moves).
  void gather_rows(const float* local, float* full, int64_t N, int64_t C) const;
  // local (local_rows, C) = Σ over TP ranks of full (N, C) [its own rows]; full is clobbered.
  // local may equal full (without sequence parallel).
  void reduce_rows(float* full, float* local, int64_t N, int64_t C) const;
};

// Megatron's vocab_parallel_cross_entropy over N rows whose logits (N, V_l) are this TP rank's
// columns [vocab_start, vocab_start + V_l) of the padded vocabulary, the first V_valid of them
// real. The softmax statistics are combined over TP (the row maximum, then Σ exp and the target
// logit), so no rank ever holds a whole row. lse (N) receives each row's log Σ exp over the
// whole vocabulary, for cross_entropy_backward; stats (4, N) is scratch. Returns Σ_n of the rows'
// losses lse[n] − logit[n, target[n]], rows with target -1 left out.
double vocab_parallel_cross_entropy(const TensorParallel& tp, float* lse, float* stats,
                                    const float* logits, const int32_t* targets,
                                    int64_t vocab_start, int64_t N, int64_t V_l, int64_t V_valid);

// One process, no tensor parallelism (a group of one, over a process-wide LocalComm).
TensorParallel no_tensor_parallel(const Kernels& kernels);

}  // namespace tessel
