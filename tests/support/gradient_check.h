// Finite-difference checking shared by the kernel and layer tests: gradients of a double-precision
// reference by central differences, and the relative error of a float result against it.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

namespace tessel::testing {

using Vec = std::vector<double>;
using Floats = std::vector<float>;

// ‖got - want‖ / ‖want‖.
inline double relative_error(const Floats& got, const Vec& want) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

inline double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// A reference forward: the inputs that get gradients, in double, to the output.
using Reference = std::function<Vec(const std::vector<Vec>&)>;

// d(Σ f(inputs) · w) / d(inputs[which]) by central differences, h = 1e-6.
inline Vec numerical_gradient(const Reference& f, std::vector<Vec> inputs, size_t which,
                              const Vec& w) {
  const double h = 1e-6;
  Vec grad(inputs[which].size());
  for (size_t j = 0; j < grad.size(); ++j) {
    const double saved = inputs[which][j];
    inputs[which][j] = saved + h;
    const double plus = dot(f(inputs), w);
    inputs[which][j] = saved - h;
    const double minus = dot(f(inputs), w);
    inputs[which][j] = saved;
    grad[j] = (plus - minus) / (2 * h);
  }
  return grad;
}

}  // namespace tessel::testing
