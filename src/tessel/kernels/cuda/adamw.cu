// AdamW, step for step as torch.optim.AdamW (and kernels/cpu/adamw.cpp): decoupled weight decay
// first, then the moments, then the bias-corrected update. The step's scalars are formed on the
// host in double and rounded to float, exactly as the CPU forms them.
#include <cmath>

#include "tessel/kernels/cuda/device.cuh"
#include "tessel/kernels/cuda/kernels.h"

namespace tessel::cuda {

namespace {

struct AdamwScalars {
  float beta1, beta2, eps, step_size, bias_correction2_sqrt, decay, one_minus_beta1,
      one_minus_beta2;
};

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n,
                             AdamwScalars s) {
  TESSEL_GRID_LOOP(i, n) {
    const float g = grad[i];
    const float mi = s.beta1 * m[i] + s.one_minus_beta1 * g;
    const float vi = s.beta2 * v[i] + s.one_minus_beta2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const float denom = sqrtf(vi) / s.bias_correction2_sqrt + s.eps;
    param[i] = param[i] * s.decay - s.step_size * (mi / denom);
  }
}

}  // namespace

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int64_t step) {
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(beta1), step);
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(beta2), step);
  const AdamwScalars s{beta1,
                       beta2,
                       eps,
                       static_cast<float>(lr / bias_correction1),
                       static_cast<float>(std::sqrt(bias_correction2)),
                       static_cast<float>(1.0 - static_cast<double>(lr) * weight_decay),
                       static_cast<float>(1.0 - beta1),
                       static_cast<float>(1.0 - beta2)};
  launch_n("adamw_update", adamw_kernel, n, param, grad, m, v, n, s);
}

}  // namespace tessel::cuda
