// How a linear layer is made of GEMMs, for every backend: the forward, and the backward's input
// and weight gradients, in either weight layout (types.h), each one gemm call of the backend's
// (cpu/gemm.h's contract). The bias is the backend's own kernel.
#pragma once

#include <cstdint>

#include "tessel/kernels/types.h"

namespace tessel {

using GemmFn = void (*)(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                        const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                        float* C, int64_t ldc);

// out (N, OC) = inp (N, IC) · W. Overwrites out.
inline void linear_forward_products(GemmFn gemm, float* out, const float* inp, const float* weight,
                                    int64_t N, int64_t IC, int64_t OC, WeightLayout layout) {
  if (layout == WeightLayout::InOut) {
    gemm(false, false, N, OC, IC, 1.0f, inp, IC, weight, OC, 0.0f, out, OC);  // inp · W
  } else {
    gemm(false, true, N, OC, IC, 1.0f, inp, IC, weight, IC, 0.0f, out, OC);  // inp · Wᵀ
  }
}

// dinp (N, IC) += dout · Wᵀ; dweight += inpᵀ · dout in the weight's layout; either may be nullptr.
inline void linear_backward_products(GemmFn gemm, float* dinp, float* dweight, const float* dout,
                                     const float* inp, const float* weight, int64_t N, int64_t IC,
                                     int64_t OC, WeightLayout layout) {
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
}

}  // namespace tessel

namespace tessel {

// A backend's linear_forward / linear_backward slots over a given gemm (its fp32 one, or its
// bf16 or fp16 one for Precision::BF16 or FP16) and its bias kernels: one definition for every
// backend and precision.
template <GemmFn Gemm, auto BiasForward>
void linear_forward_via(float* out, const float* inp, const float* weight, const float* bias,
                        int64_t N, int64_t IC, int64_t OC, WeightLayout layout) {
  linear_forward_products(Gemm, out, inp, weight, N, IC, OC, layout);
  if (bias != nullptr) BiasForward(out, bias, N, OC);
}

template <GemmFn Gemm, auto BiasBackward>
void linear_backward_via(float* dinp, float* dweight, float* dbias, const float* dout,
                         const float* inp, const float* weight, int64_t N, int64_t IC, int64_t OC,
                         WeightLayout layout) {
  linear_backward_products(Gemm, dinp, dweight, dout, inp, weight, N, IC, OC, layout);
  if (dbias != nullptr) BiasBackward(dbias, dout, N, OC);
}

}  // namespace tessel
