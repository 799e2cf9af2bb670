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

}  // namespace tessel
