// FP8 GEMMs emulated in host memory (kernels/fp8_scaling.h): the reference a CUDA backend's FP8
// GEMMs (cuBLASLt's, on FP8 operands and their scales) are held to.
#pragma once

#include <cstdint>

#include "tessel/kernels/fp8_scaling.h"
#include "tessel/kernels/linear_products.h"

namespace tessel {

// The largest magnitude of a (rows, cols) matrix of row stride ld; NaN when one is NaN.
float fp8_amax(const float* src, int64_t rows, int64_t cols, int64_t ld);

// That matrix quantised by q block by block and read back in fp32, packed into dst (stride cols).
void fp8_quantise(const Fp8Quantisation& q, float* dst, const float* src, int64_t rows, int64_t cols,
                  int64_t ld);

// `gemm` (a backend's fp32 one, cpu/gemm.h's contract) over op(A) and op(B) quantised so, qa and
// qb laid over A and B as stored: an FP8 GEMM with fp32 accumulation, emulated. The quantised
// operands are packed copies in per-thread scratch; C stays fp32.
void gemm_fp8(GemmFn gemm, const Fp8Quantisation& qa, const Fp8Quantisation& qb, bool trans_a, bool trans_b, int64_t M,
              int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B, int64_t ldb,
              float beta, float* C, int64_t ldc);

// The scales delayed scaling gives a linear layer's three operands (from the layer's amax
// histories, kernels/fp8_history.h); the other recipes scale from the operands themselves.
struct Fp8LinearScales {
  float input = 1.0f, weight = 1.0f, gradient = 1.0f;
};

// A linear layer's GEMMs (linear_products.h) in FP8, as Transformer Engine's Linear runs them:
// forward out = inp · W with inp an activation contracting along IC and W a weight; the input
// gradient dinp += dout · Wᵀ with dout a gradient contracting along OC; the weight gradient
// dweight += inpᵀ · dout with inp and dout contracting along the N rows — each operand quantised
// for its GEMM, along that GEMM's contraction (TE's rowwise and columnwise copies). Overwrites out;
// dinp or dweight may be nullptr.
void linear_forward_fp8(GemmFn gemm, const Fp8Recipe& recipe, const Fp8LinearScales& scales, float* out,
                        const float* inp, const float* weight, int64_t N, int64_t IC, int64_t OC, WeightLayout layout);
void linear_backward_fp8(GemmFn gemm, const Fp8Recipe& recipe, const Fp8LinearScales& scales, float* dinp,
                         float* dweight, const float* dout, const float* inp, const float* weight, int64_t N,
                         int64_t IC, int64_t OC, WeightLayout layout);

}  // namespace tessel
