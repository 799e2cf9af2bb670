// Linear layers: the products are linear_products.h's, each one sgemm (gemm.h); the bias is here.
#include <algorithm>

#include "tessel/kernels/cpu/gemm.h"
#include "tessel/kernels/cpu/kernels.h"
#include "tessel/kernels/linear_products.h"
#include "tessel/kernels/cpu/vec_math.h"

namespace tessel::cpu {

void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                    int64_t IC, int64_t OC, WeightLayout layout) {
  linear_forward_via<gemm, bias_forward>(out, inp, weight, bias, N, IC, OC, layout);
}

void bias_forward(float* out, const float* bias, int64_t N, int64_t OC) {
#pragma omp parallel for schedule(static) if (worth_parallel(N * OC))
  for (int64_t n = 0; n < N; ++n) {
    float* o = out + n * OC;  // (OC)
    for (int64_t j = 0; j < OC; ++j) o[j] += bias[j];
  }
}

// Threads split the columns and add the rows in order, so the sum is the same on every run and
// for every thread count.
void bias_backward(float* dbias, const float* dout, int64_t N, int64_t OC) {
  constexpr int64_t block = 64;
  const int64_t blocks = (OC + block - 1) / block;
#pragma omp parallel for schedule(static) if (worth_parallel(N * OC))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t j0 = b * block, width = std::min(block, OC - j0);
    float sum[block] = {};
    for (int64_t n = 0; n < N; ++n) {
      const float* d = dout + n * OC + j0;
      for (int64_t j = 0; j < width; ++j) sum[j] += d[j];
    }
    for (int64_t j = 0; j < width; ++j) dbias[j0 + j] += sum[j];
  }
}

void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t N, int64_t IC, int64_t OC, WeightLayout layout) {
  linear_backward_via<gemm, bias_backward>(dinp, dweight, dbias, dout, inp, weight, N, IC, OC,
                                           layout);
}

}  // namespace tessel::cpu
