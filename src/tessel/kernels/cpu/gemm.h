// Row-major single-precision GEMM: C = alpha · op(A) · op(B) + beta · C, with op(A) (M, K),
// op(B) (K, N), C (M, N). The library behind it was chosen by measurement (bench/RESULTS.md):
// oneDNN's sgemm, which picks its AVX-512 kernels itself.
#pragma once

#include <cstdint>

#include "tessel/kernels/types.h"

namespace tessel::cpu {

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// gemm with both operands rounded to bf16 first (kernels/bf16.h): the CPU's emulation of a bf16
// GEMM with fp32 accumulation, the reference of the CUDA one. The rounded operands are packed
// copies in per-thread scratch; C stays fp32.
void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
               int64_t ldc);
// The same with both operands rounded to fp16 (kernels/fp16.h: an operand past 65504 becomes inf).
void gemm_fp16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
               int64_t ldc);

// Optional accounting of every gemm call (GemmStats, types.h). Off by default: it costs two clock
// reads a call.
void gemm_stats_enable(bool on);
GemmStats gemm_stats();  // totals since enabled
void gemm_stats_reset();

}  // namespace tessel::cpu
