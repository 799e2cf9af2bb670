#include "tessel/parallel/tensor_parallel.h"

#include <memory>

namespace tessel {

void TensorParallel::gather_rows(const float* local, float* full, int64_t N, int64_t C) const {
  if (sequence_parallel) {
    comm().all_gather(local, full, local_rows(N) * C);
  } else {
    kernels->copy(full, local, N * C);
  }
}

void TensorParallel::reduce_rows(float* full, float* local, int64_t N, int64_t C) const {
  if (sequence_parallel) {
    comm().reduce_scatter(full, local, local_rows(N) * C);
    return;
  }
  if (size() > 1) comm().all_reduce(full, N * C);
  kernels->copy(local, full, N * C);
}

double vocab_parallel_cross_entropy(const TensorParallel& tp, float* lse, float* stats,
                                    const float* logits, const int32_t* targets,
                                    int64_t vocab_start, int64_t N, int64_t V_l, int64_t V_valid) {
  const Kernels& k = *tp.kernels;
  float* row_max = stats;               // (N)
  float* sum_exp = stats + N;           // (N) followed by
  float* target_logit = stats + 2 * N;  // (N): reduced together
  float* global_max = stats + 3 * N;    // (N)
  k.cross_entropy_partial_forward(row_max, sum_exp, target_logit, logits, targets, vocab_start, N,
                                  V_l, V_valid);
  k.copy(global_max, row_max, N);
  if (tp.size() > 1) {
    tp.comm().all_reduce(global_max, N, ReduceOp::Max);
    k.cross_entropy_rescale(sum_exp, row_max, global_max, N);
    tp.comm().all_reduce(sum_exp, 2 * N, ReduceOp::Sum);
  }
  return k.cross_entropy_finish(lse, global_max, sum_exp, target_logit, targets, N);
}

TensorParallel no_tensor_parallel(const Kernels& kernels) {
  return {&local_comm(kernels.memory), false, &kernels};
}

}  // namespace tessel
