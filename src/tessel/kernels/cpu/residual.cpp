#include "tessel/kernels/cpu/kernels.h"
#include "tessel/kernels/cpu/vec_math.h"

namespace tessel::cpu {

void residual_forward(float* out, const float* a, const float* b, int64_t n) {
#pragma omp parallel for simd schedule(static) if (worth_parallel(n))
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

}  // namespace tessel::cpu
