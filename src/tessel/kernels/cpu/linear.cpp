// Linear layers: every product is one sgemm (gemm.h); only the bias is done here.
#include <algorithm>

#include "tessel/kernels/cpu/gemm.h"
#include "tessel/kernels/cpu/kernels.h"
#include "tessel/kernels/cpu/vec_math.h"

namespace tessel::cpu {

void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                    int64_t IC, int64_t OC, WeightLayout layout) {
  if (layout == WeightLayout::InOut) {
    gemm(false, false, N, OC, IC, 1.0f, inp, IC, weight, OC, 0.0f, out, OC);  // inp · W
  } else {
    gemm(false, true, N, OC, IC, 1.0f, inp, IC, weight, IC, 0.0f, out, OC);  // inp · Wᵀ
  }
  if (bias != nullptr) bias_forward(out, bias, N, OC);
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
  const bool in_out = layout == WeightLayout::InOut;
  if (dinp != nullptr) {
    if (in_out) {
      gemm(false, true, N, IC, OC, 1.0f, dout, OC, weight, OC, 1.0f, dinp, IC);  // dout · Wᵀ
    } else {
      gemm(false, false, N, IC, OC, 1.0f, dout, OC, weight, IC, 1.0f, dinp, IC);  // dout · W
    }
  }
  if (dweight != nullptr) {
    if (in_out) {
      gemm(true, false, IC, OC, N, 1.0f, inp, IC, dout, OC, 1.0f, dweight, OC);  // inpᵀ · dout
    } else {
      gemm(true, false, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dweight, IC);  // doutᵀ · inp
    }
  }
  if (dbias != nullptr) bias_backward(dbias, dout, N, OC);
}

}  // namespace tessel::cpu
