// Kernel case: the AdamW update against torch.optim.AdamW's definition in double
// (support/reference.h).
#include <cmath>

#include "kernels/harness.h"
#include "support/reference.h"

namespace tessel::testing {
namespace {

void adamw_update_matches_double_reference(const Kernels& k) {
  const int64_t n = 1037;  // not a multiple of the vector width
  const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  const Floats init = random_floats(n, 1, 1.0f, 0.0f, 42);
  FloatBuffer d_p(k, init), d_m(k, n), d_v(k, n);
  ref::AdamW ref(init);
  for (int t = 1; t <= 5; ++t) {
    // Gradients of very different sizes, so eps and the bias corrections both matter.
    auto scale = [](int64_t i) { return std::pow(10.0, -static_cast<double>(i % 7)); };
    Floats g = random_floats(n, 10 + t, 1.0f, 0.0f, 42);
    for (int64_t i = 0; i < n; ++i) g[i] *= static_cast<float>(scale(i));
    const FloatBuffer d_g(k, g);
    k.adamw_update(d_p.data(), d_g.data(), d_m.data(), d_v.data(), n, lr, b1, b2, eps, wd, t);
    ref.step(g, lr, b1, b2, eps, wd, t);
    const Floats p = d_p.host(), m = d_m.host(), v = d_v.host();
    // m and v may cancel between steps: their tolerance follows the gradients' scale.
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(p[i], ref.p[i], 2e-6 * (std::abs(ref.p[i]) + lr)) << "step " << t << " i " << i;
      ASSERT_NEAR(m[i], ref.m[i], 1e-6 * scale(i)) << "step " << t << " i " << i;
      ASSERT_NEAR(v[i], ref.v[i], 1e-6 * scale(i) * scale(i)) << "step " << t << " i " << i;
    }
  }
}

const bool kRegistered = add_kernel_cases({
    {"adamw_update_matches_double_reference", {"adamw_update"},
     adamw_update_matches_double_reference},
});

}  // namespace
}  // namespace tessel::testing
