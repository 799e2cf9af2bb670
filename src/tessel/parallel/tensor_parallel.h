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
  Comm* comm = nullptr;  // the TP group
  bool sequence_parallel = false;
  const Kernels* kernels = nullptr;  // the backend whose memory the rows live in

  int rank() const { return comm->rank(); }
  int size() const { return comm->size(); }
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

// One process, no tensor parallelism (a group of one, over a process-wide LocalComm).
TensorParallel no_tensor_parallel(const Kernels& kernels);

}  // namespace tessel
