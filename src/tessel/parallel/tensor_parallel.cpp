#include "tessel/parallel/tensor_parallel.h"

#include <algorithm>
#include <cstring>
#include <memory>

namespace tessel {

void TensorParallel::gather_rows(const float* local, float* full, int64_t N, int64_t C) const {
  if (sequence_parallel) {
    comm->all_gather(local, full, local_rows(N) * C);
  } else if (full != local) {
    std::memcpy(full, local, sizeof(float) * N * C);
  }
}

void TensorParallel::reduce_rows(float* full, float* local, int64_t N, int64_t C) const {
  if (sequence_parallel) {
    comm->reduce_scatter(full, local, local_rows(N) * C);
    return;
  }
  if (size() > 1) comm->all_reduce(full, N * C);
  if (local != full) std::memcpy(local, full, sizeof(float) * N * C);
}

std::vector<float> gather_global(const Param& param, Comm& group) {
  const int64_t n = param.numel();
  std::vector<float> global(shape_numel(param.global_shape));
  if (param.shard.dim < 0) {
    std::copy(param.value, param.value + n, global.begin());
    return global;
  }
  std::vector<float> shards(n * group.size());
  group.all_gather(param.value, shards.data(), n);
  Param other = param;  // the same parameter as rank r holds it
  for (int r = 0; r < group.size(); ++r) {
    other.shard.index = r;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t g = other.global_index(i);
      if (g >= 0) global[g] = shards[r * n + i];
    }
  }
  return global;
}

TensorParallel no_tensor_parallel() {
  static const std::unique_ptr<Comm> local = make_local_comm();
  return {local.get(), false};
}

}  // namespace tessel
