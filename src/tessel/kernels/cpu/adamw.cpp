// AdamW, step for step as torch.optim.AdamW (the single-tensor path) so the PyTorch cross-check
// can compare parameters after every step: decoupled weight decay first, then the moments, then
// the bias-corrected update.
#include <cmath>

#include "tessel/kernels/cpu/kernels.h"

namespace tessel::cpu {

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int64_t step) {
  // PyTorch forms these scalars in double (Python floats) and rounds them to float when they
  // meet the fp32 tensors; doing the same keeps the two within an ulp.
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(beta1), step);
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(beta2), step);
  const float step_size = static_cast<float>(lr / bias_correction1);
  const float bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  const float decay = static_cast<float>(1.0 - static_cast<double>(lr) * weight_decay);
  const float one_minus_beta1 = static_cast<float>(1.0 - beta1);
  const float one_minus_beta2 = static_cast<float>(1.0 - beta2);
  // Small tensors (biases, norm weights) are not worth waking the thread team for.
#pragma omp parallel for simd schedule(static) if (n >= 16384)
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i];
    const float mi = beta1 * m[i] + one_minus_beta1 * g;
    const float vi = beta2 * v[i] + one_minus_beta2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) / bias_correction2_sqrt + eps;
    param[i] = param[i] * decay - step_size * (mi / denom);
  }
}

}  // namespace tessel::cpu
