#include "tessel/ckpt/shards.h"

namespace tessel {

std::vector<float> gather_global(const ParamRegistry& params, const Param& param, Comm& group) {
  const int64_t n = param.numel();
  std::vector<float> local = params.to_host(param);
  if (param.shard.dim < 0) return local;
  std::vector<float> global(shape_numel(param.global_shape));
  std::vector<float> shards(n * group.size());
  group.all_gather(local.data(), shards.data(), n);
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

void take_local_slice(const Param& p, const float* global, float* local) {
  for (int64_t i = 0; i < p.numel(); ++i) {
    const int64_t g = p.global_index(i);
    local[i] = g < 0 ? 0.0f : global[g];
  }
}

void set_from_global(ParamRegistry& registry, Param& p, const float* global) {
  if (p.local_shape == p.global_shape) return registry.from_host(p, global);
  std::vector<float> local(p.numel());
  take_local_slice(p, global, local.data());
  registry.from_host(p, local.data());
}

}  // namespace tessel
