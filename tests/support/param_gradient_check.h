// Finite-difference checking of a whole model's parameter gradients, shared by the model and
// multi-token prediction tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>

#include "tessel/core/params.h"

namespace tessel::testing {

struct ParamGradientCheck {
  double error = 0, norm = 0;  // ‖fd − grad‖ and ‖fd‖ over the elements checked
};

// Parameter p's gradient against central differences of the scalar `objective` at ~48 of its
// elements, each moved by ±h in place and restored. h balances fp32 rounding (grows as h
// shrinks) against truncation error (grows as h²).
inline ParamGradientCheck check_param_gradient(const Param& p, const std::function<double()>& objective,
                                               float h) {
  double diff = 0, norm = 0;
  const int64_t stride = std::max<int64_t>(1, p.numel() / 48);
  for (int64_t i = 0; i < p.numel(); i += stride) {
    const float saved = p.value[i];
    p.value[i] = saved + h;
    const double up = objective();
    p.value[i] = saved - h;
    const double down = objective();
    p.value[i] = saved;
    const double fd = (up - down) / (2 * h);
    diff += (fd - p.grad[i]) * (fd - p.grad[i]);
    norm += fd * fd;
  }
  return {std::sqrt(diff), std::sqrt(norm)};
}

}  // namespace tessel::testing
