// FP8 GEMMs emulated exactly (kernels/fp8_scaling.h): each operand quantised block by block and
// read back in fp32, then the backend's fp32 gemm. Products of two FP8 values are exact in fp32, so this is
// what an FP8 tensor-core GEMM computes from the same quantised operands, up to the order of the
// sums and where the scales are applied.
#include "tessel/kernels/fp8_gemm.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tessel {

float fp8_amax(const float* src, int64_t rows, int64_t cols, int64_t ld) {
  float amax = 0.0f;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float a = std::fabs(src[r * ld + c]);
      if (a > amax || std::isnan(a)) amax = a;  // once NaN, it stays NaN
    }
  return amax;
}

void fp8_quantise(const Fp8Quantisation& q, float* dst, const float* src, int64_t rows, int64_t cols,
                  int64_t ld) {
  const int64_t block_rows = q.block_rows > 0 ? q.block_rows : std::max<int64_t>(rows, 1);
  const int64_t block_cols = q.block_cols > 0 ? q.block_cols : std::max<int64_t>(cols, 1);
  const int64_t row_blocks = (rows + block_rows - 1) / block_rows;
  const int64_t col_blocks = (cols + block_cols - 1) / block_cols;
#pragma omp parallel for collapse(2) schedule(static) if (rows * cols > (int64_t{1} << 16) && row_blocks * col_blocks > 1)
  for (int64_t rb = 0; rb < row_blocks; ++rb)
    for (int64_t cb = 0; cb < col_blocks; ++cb) {
      const int64_t r0 = rb * block_rows, c0 = cb * block_cols;
      const int64_t nr = std::min(block_rows, rows - r0), nc = std::min(block_cols, cols - c0);
      const float* block = src + r0 * ld + c0;
      const float s = q.rule == Fp8ScaleRule::Given
                          ? q.scale
                          : fp8_scale_from_amax(q.rule, q.format, fp8_amax(block, nr, nc, ld));
      for (int64_t r = 0; r < nr; ++r)
        for (int64_t c = 0; c < nc; ++c)
          dst[(r0 + r) * cols + c0 + c] = fp8_fake_quantise(q.format, block[r * ld + c], s);
    }
}

void gemm_fp8(GemmFn gemm, const Fp8Quantisation& qa, const Fp8Quantisation& qb, bool trans_a, bool trans_b, int64_t M,
              int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B, int64_t ldb,
              float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  thread_local std::vector<float> a_quantised, b_quantised;
  // Stored shapes: op(A) (M, K) is A (K, M) when transposed, op(B) (K, N) is B (N, K).
  const int64_t a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;
  const int64_t b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
  a_quantised.resize(static_cast<size_t>(a_rows * a_cols));
  b_quantised.resize(static_cast<size_t>(b_rows * b_cols));
  fp8_quantise(qa, a_quantised.data(), A, a_rows, a_cols, lda);
  fp8_quantise(qb, b_quantised.data(), B, b_rows, b_cols, ldb);
  gemm(trans_a, trans_b, M, N, K, alpha, a_quantised.data(), a_cols, b_quantised.data(), b_cols, beta, C, ldc);
}

namespace {

// The stored (rows, cols) operand at src (packed) quantised as `operand` for a GEMM contracting
// along its columns or rows, into `scratch`.
const float* quantised(std::vector<float>& scratch, const Fp8Recipe& recipe, Fp8Operand operand, float delayed_scale,
                       const float* src, int64_t rows, int64_t cols, bool contracts_along_cols) {
  Fp8Quantisation q = fp8_operand_quantisation(recipe, operand, contracts_along_cols);
  q.scale = delayed_scale;
  scratch.resize(static_cast<size_t>(rows * cols));
  fp8_quantise(q, scratch.data(), src, rows, cols, cols);
  return scratch.data();
}

}  // namespace

void linear_forward_fp8(GemmFn gemm, const Fp8Recipe& recipe, const Fp8LinearScales& scales, float* out,
                        const float* inp, const float* weight, int64_t N, int64_t IC, int64_t OC, WeightLayout layout) {
  thread_local std::vector<float> inp_q, weight_q;
  const bool in_out = layout == WeightLayout::InOut;  // W (IC, OC): contracts along its rows
  linear_forward_products(
      gemm, out, quantised(inp_q, recipe, Fp8Operand::Activation, scales.input, inp, N, IC, true),
      quantised(weight_q, recipe, Fp8Operand::Weight, scales.weight, weight, in_out ? IC : OC, in_out ? OC : IC, !in_out),
      N, IC, OC, layout);
}

void linear_backward_fp8(GemmFn gemm, const Fp8Recipe& recipe, const Fp8LinearScales& scales, float* dinp,
                         float* dweight, const float* dout, const float* inp, const float* weight, int64_t N,
                         int64_t IC, int64_t OC, WeightLayout layout) {
  thread_local std::vector<float> first_q, second_q;
  const bool in_out = layout == WeightLayout::InOut;
  if (dinp != nullptr)  // dout · Wᵀ: W (IC, OC) contracts along its columns, (OC, IC) along its rows
    linear_backward_products(
        gemm, dinp, nullptr, quantised(first_q, recipe, Fp8Operand::Gradient, scales.gradient, dout, N, OC, true),
        nullptr,
        quantised(second_q, recipe, Fp8Operand::Weight, scales.weight, weight, in_out ? IC : OC, in_out ? OC : IC,
                  in_out),
        N, IC, OC, layout);
  if (dweight != nullptr)
    linear_backward_products(
        gemm, nullptr, dweight, quantised(first_q, recipe, Fp8Operand::Gradient, scales.gradient, dout, N, OC, false),
        quantised(second_q, recipe, Fp8Operand::Activation, scales.input, inp, N, IC, false), nullptr, N, IC, OC,
        layout);
}

}  // namespace tessel
