// A layer's forward and every gradient against a double-precision reference of it: the output,
// d(input) and each named parameter's gradient by central differences of Σ reference · weights.
#pragma once

#include <gtest/gtest.h>

#include <span>
#include <string>
#include <vector>

#include "support/gradient_check.h"
#include "tessel/core/params.h"

namespace tessel::testing {

// The reference's inputs are x then the parameters `prefix + names[i]` in order; `out` and `dx`
// are the layer's output and input gradient for the loss Σ out · weights, and the parameters'
// gradients are read from the registry.
inline void expect_layer_matches_reference(const ParamRegistry& registry, const std::string& prefix,
                                           std::span<const char* const> names,
                                           const Reference& reference, const Floats& x,
                                           const Floats& out, const Floats& dx,
                                           const Floats& weights) {
  std::vector<Vec> inputs = {Vec(x.begin(), x.end())};
  for (const char* name : names) {
    const Param& param = registry.get(prefix + name);
    inputs.emplace_back(param.value, param.value + param.numel());
  }
  EXPECT_LT(relative_error(out, reference(inputs)), 1e-5);
  const Vec w(weights.begin(), weights.end());
  EXPECT_LT(relative_error(dx, numerical_gradient(reference, inputs, 0, w)), 1e-4) << "d x";
  for (size_t i = 0; i < names.size(); ++i) {
    const Param& param = registry.get(prefix + names[i]);
    EXPECT_LT(relative_error(Floats(param.grad, param.grad + param.numel()),
                             numerical_gradient(reference, inputs, i + 1, w)),
              1e-4)
        << names[i];
  }
}

}  // namespace tessel::testing
