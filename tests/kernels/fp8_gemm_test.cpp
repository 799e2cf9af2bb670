// The emulated FP8 GEMM (kernels/fp8_gemm.h) under each recipe of kernels/fp8_scaling.h: bitwise
// equal to the fp32 gemm of operands dequantised here, independently — each block's amax, its
// scale by Transformer Engine's documented rule (current scaling: largest / amax; blockwise: that
// rounded down to a power of two; MXFP8: the power of two at or above amax / largest, inverted),
// fp8(x · s) · (1/s) on the grid of fp8_test.cpp — with the blocks laid along each operand's
// contraction dimension, in every transpose, both formats, blocks cut at the edges.
#include "tessel/kernels/fp8_gemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "tessel/kernels/kernels.h"

namespace tessel {
namespace {

using Floats = std::vector<float>;

// Values whose magnitudes differ by row and by column (so blocks have different amaxes), with
// some exact zeros.
Floats spread_floats(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Floats x(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      x[r * cols + c] = (r * 7 + c) % 23 == 0 ? 0.0f : normal(rng) * std::ldexp(1.0f, static_cast<int>((r + 3 * (c / 40)) % 9) - 4);
  return x;
}

// s for a block of amax `amax`, as the recipes' documentation states it.
float documented_scale(Fp8Scaling scaling, Fp8Format format, float amax) {
  const float largest = format == Fp8Format::E4M3 ? 448.0f : 57344.0f;
  if (amax == 0.0f) return 1.0f;
  if (scaling == Fp8Scaling::Mxfp8) {
    int exponent = 0;
    const float fraction = std::frexp(amax / largest, &exponent);  // amax/largest = fraction · 2^exponent
    return std::ldexp(1.0f, fraction == 0.5f ? -(exponent - 1) : -exponent);  // 1 / 2^ceil(log2)
  }
  const float s = largest / amax;
  if (scaling == Fp8Scaling::Blockwise) {
    int exponent = 0;
    std::frexp(s, &exponent);
    return std::ldexp(1.0f, exponent - 1);  // 2^floor(log2 s)
  }
  return s;
}

// The stored (rows, cols) operand dequantised: blocks of (block_rows, block_cols).
Floats documented_dequantised(Fp8Scaling scaling, Fp8Format format, const Floats& x, int64_t rows, int64_t cols,
                              int64_t block_rows, int64_t block_cols) {
  Floats out(x.size());
  for (int64_t r0 = 0; r0 < rows; r0 += block_rows)
    for (int64_t c0 = 0; c0 < cols; c0 += block_cols) {
      const int64_t r1 = std::min(rows, r0 + block_rows), c1 = std::min(cols, c0 + block_cols);
      float amax = 0.0f;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(x[r * cols + c]));
      const float s = documented_scale(scaling, format, amax);
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) out[r * cols + c] = round_to_fp8(format, x[r * cols + c] * s) * (1.0f / s);
    }
  return out;
}

struct Case {
  Fp8Scaling scaling;
  bool hybrid;
  const char* name;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class Fp8Gemm : public ::testing::TestWithParam<Case> {};

// The three GEMMs of a linear layer: forward (activation · weight), the input gradient
// (gradient · weight) and the weight gradient (activation · gradient), each in all four
// transposes, so every operand's contraction runs along its rows and along its columns.
TEST_P(Fp8Gemm, EqualsTheFp32GemmOfTheDequantisedOperands) {
  const Case c = GetParam();
  const Kernels& k = cpu_kernels();
  const Fp8Recipe recipe{c.scaling, c.hybrid};
  const int64_t M = 150, N = 70, K = 300;  // blocks of 128 and 32 cut at the edges
  const Fp8Operand pairs[][2] = {{Fp8Operand::Activation, Fp8Operand::Weight},
                                 {Fp8Operand::Gradient, Fp8Operand::Weight},
                                 {Fp8Operand::Activation, Fp8Operand::Gradient}};
  uint32_t seed = 1;
  for (const auto& pair : pairs)
    for (bool trans_a : {false, true})
      for (bool trans_b : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "operands " << int(pair[0]) << "," << int(pair[1]) << " trans "
                                          << trans_a << trans_b);
        const int64_t a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;
        const int64_t b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
        const Floats A = spread_floats(a_rows, a_cols, seed++), B = spread_floats(b_rows, b_cols, seed++);
        const Floats C0 = spread_floats(M, N, seed++);
        const Fp8Quantisation qa = fp8_operand_quantisation(recipe, pair[0], !trans_a);
        const Fp8Quantisation qb = fp8_operand_quantisation(recipe, pair[1], trans_b);

        // The blocks the recipe documents: 2-D for blockwise weights, else 1-D along the
        // contraction; one block for tensorwise.
        const auto blocks = [&](Fp8Operand operand, bool contracts_along_cols, int64_t rows, int64_t cols) {
          const int64_t length = c.scaling == Fp8Scaling::Mxfp8 ? 32 : 128;
          if (c.scaling == Fp8Scaling::Tensorwise) return std::pair{rows, cols};
          if (c.scaling == Fp8Scaling::Blockwise && operand == Fp8Operand::Weight) return std::pair{int64_t{128}, int64_t{128}};
          return contracts_along_cols ? std::pair{int64_t{1}, length} : std::pair{length, int64_t{1}};
        };
        const auto [abr, abc] = blocks(pair[0], !trans_a, a_rows, a_cols);
        const auto [bbr, bbc] = blocks(pair[1], trans_b, b_rows, b_cols);
        const Fp8Format a_format = c.hybrid && pair[0] == Fp8Operand::Gradient ? Fp8Format::E5M2 : Fp8Format::E4M3;
        const Fp8Format b_format = c.hybrid && pair[1] == Fp8Operand::Gradient ? Fp8Format::E5M2 : Fp8Format::E4M3;
        const Floats A_dq = documented_dequantised(c.scaling, a_format, A, a_rows, a_cols, abr, abc);
        const Floats B_dq = documented_dequantised(c.scaling, b_format, B, b_rows, b_cols, bbr, bbc);

        Floats want = C0, got = C0;
        k.gemm(trans_a, trans_b, M, N, K, 0.75f, A_dq.data(), a_cols, B_dq.data(), b_cols, 0.5f, want.data(), N);
        gemm_fp8(k.gemm, qa, qb, trans_a, trans_b, M, N, K, 0.75f, A.data(), a_cols, B.data(), b_cols, 0.5f, got.data(),
                      N);
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i])) << "element " << i;

        // Quantisation changed the operands: the emulation is not fp32's GEMM.
        Floats fp32 = C0;
        k.gemm(trans_a, trans_b, M, N, K, 0.75f, A.data(), a_cols, B.data(), b_cols, 0.5f, fp32.data(), N);
        EXPECT_NE(fp32, got);
      }
}

INSTANTIATE_TEST_SUITE_P(Recipes, Fp8Gemm,
                         ::testing::Values(Case{Fp8Scaling::Tensorwise, false, "tensorwise_e4m3"},
                                           Case{Fp8Scaling::Tensorwise, true, "tensorwise_hybrid"},
                                           Case{Fp8Scaling::Blockwise, false, "blockwise_e4m3"},
                                           Case{Fp8Scaling::Blockwise, true, "blockwise_hybrid"},
                                           Case{Fp8Scaling::Mxfp8, false, "mxfp8_e4m3"},
                                           Case{Fp8Scaling::Mxfp8, true, "mxfp8_hybrid"}),
                         [](const auto& info) { return std::string(info.param.name); });

// Delayed scaling quantises with the scale it is given, whatever the tensor's own amax: values
// past largest / s saturate.
TEST(Fp8Quantise, DelayedUsesTheGivenScaleAndSaturates) {
  Fp8Quantisation q = fp8_operand_quantisation(Fp8Recipe{Fp8Scaling::Delayed, true}, Fp8Operand::Gradient, true);
  EXPECT_EQ(q.format, Fp8Format::E5M2);
  q.scale = 0.25f;
  const Floats x = {1.0f, -3.0f, 1e6f, -1e9f, 0.0f, 0x1p-20f};
  Floats out(x.size());
  fp8_quantise(q, out.data(), x.data(), 2, 3, 3);
  const Floats want = {1.0f, -3.0f, 57344.0f * 4, -57344.0f * 4, 0.0f, 0.0f};  // 2^-22 is below E5M2's 2^-16
  EXPECT_EQ(out, want);
}

// A block of zeros stays zero, and a block with a NaN keeps scale 1 (kernels/fp8_scaling.h): its
// NaN stays NaN, its other values quantise unscaled.
TEST(Fp8Quantise, ZeroAndNanBlocks) {
  const Fp8Quantisation q = fp8_operand_quantisation(Fp8Recipe{Fp8Scaling::Mxfp8, false}, Fp8Operand::Activation, true);
  Floats x(64, 0.0f);
  x[40] = NAN;
  x[33] = 3.0f;
  Floats out(64, 1.0f);
  fp8_quantise(q, out.data(), x.data(), 1, 64, 64);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], 0.0f) << i;
  EXPECT_EQ(out[33], 3.0f);
  EXPECT_TRUE(std::isnan(out[40]));
  EXPECT_TRUE(std::isnan(fp8_amax(x.data(), 1, 64, 64)));
  EXPECT_EQ(fp8_amax(x.data(), 1, 34, 64), 3.0f);
}

}  // namespace
}  // namespace tessel
