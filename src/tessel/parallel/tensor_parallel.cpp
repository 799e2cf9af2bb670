#include "tessel/parallel/tensor_parallel.h"

#include <memory>

namespace tessel {

void TensorParallel::gather_rows(const float* local, float* full, int64_t N, int64_t C) const {
  if (sequence_parallel) {
    comm->all_gather(local, full, local_rows(N) * C);
  } else {
    kernels->copy(full, local, N * C);
  }
}

void TensorParallel::reduce_rows(float* full, float* local, int64_t N, int64_t C) const {
  if (sequence_parallel) {
    comm->reduce_scatter(full, local, local_rows(N) * C);
    return;
  }
  if (size() > 1) comm->all_reduce(full, N * C);
  kernels->copy(local, full, N * C);
}

TensorParallel no_tensor_parallel(const Kernels& kernels) {
  static const std::unique_ptr<Comm> local = make_local_comm();
  return {local.get(), false, &kernels};
}

}  // namespace tessel
