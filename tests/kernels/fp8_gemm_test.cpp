// The emulated FP8 GEMM and linear layer (kernels/fp8_gemm.h) under each recipe of
// kernels/fp8_scaling.h: bitwise equal to the fp32 gemm of operands dequantised here,
// independently — each block's amax, its
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
#include <utility>
#include <vector>

#include "tessel/kernels/kernels.h"

namespace tessel {
namespace {

using Floats = std::vector<float>;

// Values whose magnitudes differ by row and by column (so blocks have different amaxes), with
// some exact zeros and some so small that where they round depends on their block's scale.
Floats spread_floats(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Floats x(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      x[r * cols + c] = (r * 7 + c) % 23 == 0   ? 0.0f
                        : (r * 5 + c * 3) % 17 == 0 ? normal(rng) * 0x1p-24f  // subnormal under most scales
                                                    : normal(rng) * std::ldexp(1.0f, static_cast<int>((r + 3 * (c / 40)) % 9) - 4);
  return x;
}

// s for a block of amax `amax`, as the recipes' documentation states it; delayed's is given.
float documented_scale(Fp8Scaling scaling, Fp8Format format, float amax, float given) {
  const float largest = format == Fp8Format::E4M3 ? 448.0f : 57344.0f;
  if (scaling == Fp8Scaling::Delayed) return given;
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

// The blocks the recipes document for an operand stored (rows, cols): 2-D tiles of 128 for
// blockwise weights, else 1-D along the contraction (128, or MXFP8's 32); one block for the
// per-tensor recipes.
std::pair<int64_t, int64_t> documented_blocks(Fp8Scaling scaling, Fp8Operand operand, bool contracts_along_cols,
                                              int64_t rows, int64_t cols) {
  const int64_t length = scaling == Fp8Scaling::Mxfp8 ? 32 : 128;
  if (scaling == Fp8Scaling::Tensorwise || scaling == Fp8Scaling::Delayed) return {rows, cols};
  if (scaling == Fp8Scaling::Blockwise && operand == Fp8Operand::Weight) return {128, 128};
  return contracts_along_cols ? std::pair<int64_t, int64_t>{1, length} : std::pair<int64_t, int64_t>{length, 1};
}

// The stored (rows, cols) operand dequantised as `operand` for a GEMM contracting along its
// columns or rows; `given`: delayed scaling's scale.
Floats documented_dequantised(const Fp8Recipe& recipe, Fp8Operand operand, bool contracts_along_cols, const Floats& x,
                              int64_t rows, int64_t cols, float given = 1.0f) {
  const Fp8Scaling scaling = recipe.scaling;
  const Fp8Format format = recipe.hybrid && operand == Fp8Operand::Gradient ? Fp8Format::E5M2 : Fp8Format::E4M3;
  const auto [block_rows, block_cols] = documented_blocks(scaling, operand, contracts_along_cols, rows, cols);
  Floats out(x.size());
  for (int64_t r0 = 0; r0 < rows; r0 += block_rows)
    for (int64_t c0 = 0; c0 < cols; c0 += block_cols) {
      const int64_t r1 = std::min(rows, r0 + block_rows), c1 = std::min(cols, c0 + block_cols);
      float amax = 0.0f;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(x[r * cols + c]));
      const float s = documented_scale(scaling, format, amax, given);
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

        const Floats A_dq = documented_dequantised(recipe, pair[0], !trans_a, A, a_rows, a_cols);
        const Floats B_dq = documented_dequantised(recipe, pair[1], trans_b, B, b_rows, b_cols);

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

struct LinearCase {
  Fp8Scaling scaling;
  bool hybrid;
  const char* name;
};
void PrintTo(const LinearCase& c, std::ostream* os) { *os << c.name; }

class Fp8Linear : public ::testing::TestWithParam<LinearCase> {};

// A linear layer's forward, input gradient and weight gradient in both weight layouts, each equal
// to the fp32 products over its operands dequantised for that GEMM (delayed: with given scales
// that saturate some values).
TEST_P(Fp8Linear, QuantisesEachOperandForItsGemm) {
  const LinearCase c = GetParam();
  const Kernels& k = cpu_kernels();
  const Fp8Recipe recipe{c.scaling, c.hybrid};
  const Fp8LinearScales scales{.input = 40.0f, .weight = 300.0f, .gradient = 2000.0f};
  const int64_t N = 140, IC = 96, OC = 160;
  const Floats inp = spread_floats(N, IC, 11), dout = spread_floats(N, OC, 12);
  for (WeightLayout layout : {WeightLayout::InOut, WeightLayout::OutIn}) {
    const bool in_out = layout == WeightLayout::InOut;
    SCOPED_TRACE(in_out ? "InOut" : "OutIn");
    const int64_t w_rows = in_out ? IC : OC, w_cols = in_out ? OC : IC;
    const Floats weight = spread_floats(w_rows, w_cols, 13);
    const Floats dinp0 = spread_floats(N, IC, 14), dweight0 = spread_floats(w_rows, w_cols, 15);

    Floats want(N * OC), got(N * OC);
    linear_forward_products(k.gemm, want.data(),
                            documented_dequantised(recipe, Fp8Operand::Activation, true, inp, N, IC, scales.input).data(),
                            documented_dequantised(recipe, Fp8Operand::Weight, !in_out, weight, w_rows, w_cols,
                                                   scales.weight).data(),
                            N, IC, OC, layout);
    linear_forward_fp8(k.gemm, recipe, scales, got.data(), inp.data(), weight.data(), N, IC, OC, layout);
    EXPECT_EQ(got, want) << "forward";

    Floats dinp_want = dinp0, dinp_got = dinp0, dweight_want = dweight0, dweight_got = dweight0;
    linear_backward_products(
        k.gemm, dinp_want.data(), nullptr,
        documented_dequantised(recipe, Fp8Operand::Gradient, true, dout, N, OC, scales.gradient).data(), nullptr,
        documented_dequantised(recipe, Fp8Operand::Weight, in_out, weight, w_rows, w_cols, scales.weight).data(), N, IC,
        OC, layout);
    linear_backward_products(
        k.gemm, nullptr, dweight_want.data(),
        documented_dequantised(recipe, Fp8Operand::Gradient, false, dout, N, OC, scales.gradient).data(),
        documented_dequantised(recipe, Fp8Operand::Activation, false, inp, N, IC, scales.input).data(), nullptr, N, IC,
        OC, layout);
    linear_backward_fp8(k.gemm, recipe, scales, dinp_got.data(), dweight_got.data(), dout.data(), inp.data(),
                        weight.data(), N, IC, OC, layout);
    EXPECT_EQ(dinp_got, dinp_want) << "input gradient";
    EXPECT_EQ(dweight_got, dweight_want) << "weight gradient";
  }
}

INSTANTIATE_TEST_SUITE_P(Recipes, Fp8Linear,
                         ::testing::Values(LinearCase{Fp8Scaling::Delayed, true, "delayed_hybrid"},
                                           LinearCase{Fp8Scaling::Tensorwise, true, "tensorwise_hybrid"},
                                           LinearCase{Fp8Scaling::Blockwise, false, "blockwise_e4m3"},
                                           LinearCase{Fp8Scaling::Mxfp8, true, "mxfp8_hybrid"}),
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
