#include "tessel/ckpt/finite_weights.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tessel/core/error.h"

namespace tessel {

int64_t first_non_finite(const Kernels& k, const float* x, int64_t n) {
  if (std::isfinite(k.sum_squares(x, n, 0.0))) return -1;
  std::vector<float> host(n);
  k.memory.to_host(host.data(), x, n * 4);
  return std::find_if(host.begin(), host.end(), [](float v) { return !std::isfinite(v); }) -
         host.begin();
}

void require_finite_weights(const Kernels& k, const ParamRegistry& params, const std::string& source) {
  for (const Param& p : params.params()) {
    const int64_t bad = first_non_finite(k, p.value, p.numel());
    if (bad < 0) continue;
    std::vector<float> value(1);
    k.memory.to_host(value.data(), p.value + bad, 4);
    fail("{}: {} holds a non-finite value ({} at element {} of the {} this rank holds): refusing it",
         source, p.name, value[0], bad, p.numel());
  }
}

}  // namespace tessel
