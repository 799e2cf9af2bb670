// bf16 mixed precision (--bf16): the rounding (kernels/bf16.h) and every backend's bf16 table —
// its GEMM slots (gemm, linear_forward, linear_backward) against a double-precision reference
// over operands rounded to bf16, within fp32 accumulation's 1e-5; measurably different from the
// fp32 result (the rounding is there) but within bf16's precision of it; every other slot the fp32
// table's own. On a machine with a GPU the CUDA bf16 table (cuBLASLt bf16 operands) runs the same
// checks, so it is compared with the CPU's emulation of the same rounding points.
#include "tessel/kernels/bf16.h"

#include <cmath>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "kernels/harness.h"
#include "support/reference.h"

namespace tessel::testing {
namespace {

// The bf16 precision of one product, relative: operands lose up to 2^-9 each.
constexpr double kBf16Tolerance = 2e-2;

Floats rounded(Floats x) {
  for (float& v : x) v = round_to_bf16(v);
  return x;
}

TEST(Bf16, RoundsToNearestEven) {
  const float ulp = std::ldexp(1.0f, -7);  // bf16's spacing in [1, 2)
  EXPECT_EQ(round_to_bf16(1.0f), 1.0f);
  EXPECT_EQ(round_to_bf16(1.0f + ulp / 2), 1.0f);  // a tie: the even neighbour
  EXPECT_EQ(round_to_bf16(1.0f + 3 * ulp / 2),
            1.0f + 2 * ulp);  // a tie: the even neighbour
  EXPECT_EQ(round_to_bf16(1.0f + ulp / 2 + std::ldexp(1.0f, -20)),
            1.0f + ulp);  // above the tie
  EXPECT_EQ(round_to_bf16(-1.0f - ulp / 4), -1.0f);
  EXPECT_EQ(round_to_bf16(3.14159265f), 3.140625f);
  EXPECT_EQ(bf16_bits(1.0f), 0x3f80);
  EXPECT_EQ(round_to_bf16(std::numeric_limits<float>::max()),
            INFINITY);  // rounds up past max
  EXPECT_EQ(round_to_bf16(-INFINITY), -INFINITY);
  EXPECT_TRUE(std::isnan(round_to_bf16(NAN)));
  const float tiny = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(round_to_bf16(tiny), 0.0f);
}

// A backend's bf16 table, printed by its name in test listings.
struct Bf16Backend {
  const Kernels* table;
};
void PrintTo(const Bf16Backend& b, std::ostream* os) { *os << b.table->name; }

std::vector<Bf16Backend> bf16_backends() {
  std::vector<Bf16Backend> all;
  for (const Kernels* k : available_kernels(Precision::BF16)) all.push_back({k});
  return all;
}

class Bf16Table : public ::testing::TestWithParam<Bf16Backend> {};

// Every transpose pair, padded leading dimensions (the padding untouched), alpha and beta.
TEST_P(Bf16Table, GemmRoundsBothOperands) {
  const Kernels& k = *GetParam().table;
  ASSERT_EQ(k.precision, Precision::BF16);
  const int64_t M = 37, N = 29, K = 300, pad = 3;
  const float alpha = 0.75f, beta = -0.5f;
  for (bool trans_a : {false, true})
    for (bool trans_b : {false, true}) {
      SCOPED_TRACE(std::string(trans_a ? "T" : "N") + (trans_b ? "T" : "N"));
      const int64_t a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;
      const int64_t b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
      const int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = N + pad;
      const Floats a = random_floats(a_rows * lda, 80), b = random_floats(b_rows * ldb, 81);
      const Floats c0 = random_floats(M * ldc, 82);
      const FloatBuffer d_a(k, a), d_b(k, b);
      FloatBuffer c(k, c0);
      k.gemm(trans_a, trans_b, M, N, K, alpha, d_a.data(), lda, d_b.data(), ldb, beta, c.data(),
             ldc);
      const Floats got = c.host(), a16 = rounded(a), b16 = rounded(b);
      Floats inside;
      Vec want, want_fp32;
      for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) {
          double sum = 0, sum_fp32 = 0;
          for (int64_t p = 0; p < K; ++p) {
            const int64_t ai = trans_a ? p * lda + i : i * lda + p;
            const int64_t bi = trans_b ? j * ldb + p : p * ldb + j;
            sum += double{a16[ai]} * b16[bi];
            sum_fp32 += double{a[ai]} * b[bi];
          }
          want.push_back(alpha * sum + beta * double{c0[i * ldc + j]});
          want_fp32.push_back(alpha * sum_fp32 + beta * double{c0[i * ldc + j]});
          inside.push_back(got[i * ldc + j]);
        }
        for (int64_t j = N; j < ldc; ++j) EXPECT_EQ(got[i * ldc + j], c0[i * ldc + j]);
      }
      EXPECT_LT(max_relative_error(inside, want), kForwardTolerance);
      const double off_fp32 = max_relative_error(inside, want_fp32);
      EXPECT_GT(off_fp32, 1e-4) << "the operands were not rounded";
      EXPECT_LT(off_fp32, kBf16Tolerance);
    }
}

// The linear layer in both layouts: forward over rounded input and weight (the bias added in
// fp32), the input gradient over rounded dout and weight, the weight gradient over rounded input
// and dout — accumulated into fp32 gradients — and the bias gradient from dout unrounded.
TEST_P(Bf16Table, LinearLayerRoundsEveryProduct) {
  const Kernels& k = *GetParam().table;
  const int64_t N = 9, IC = 70, OC = 23;
  const Floats inp = random_floats(N * IC, 83), weight = random_floats(IC * OC, 84, 0.3f);
  const Floats bias = random_floats(OC, 85), dout = random_floats(N * OC, 86);
  const Vec inp16 = to_double(rounded(inp)), weight16 = to_double(rounded(weight));
  const Vec dout16 = to_double(rounded(dout));
  const FloatBuffer d_inp(k, inp), d_weight(k, weight), d_bias(k, bias), d_dout(k, dout);
  for (WeightLayout layout : {WeightLayout::InOut, WeightLayout::OutIn}) {
    const bool in_out = layout == WeightLayout::InOut;
    SCOPED_TRACE(in_out ? "InOut" : "OutIn");
    FloatBuffer out(k, N * OC, 7.0f);
    k.linear_forward(out.data(), d_inp.data(), d_weight.data(), d_bias.data(), N, IC, OC, layout);
    EXPECT_LT(relative_error(out.host(),
                             ref::linear(inp16, weight16, to_double(bias), N, IC, OC, in_out)),
              kForwardTolerance);

    const Floats dinp0 = random_floats(N * IC, 87), dweight0 = random_floats(IC * OC, 88);
    const Floats dbias0 = random_floats(OC, 89);
    FloatBuffer dinp(k, dinp0), dweight(k, dweight0), dbias(k, dbias0);
    k.linear_backward(dinp.data(), dweight.data(), dbias.data(), d_dout.data(), d_inp.data(),
                      d_weight.data(), N, IC, OC, layout);
    // dinp = dout · Wᵀ: a linear layer from OC to IC over the same weight, the
    // other layout.
    Vec want_dinp = ref::linear(dout16, weight16, {}, N, OC, IC, !in_out);
    Vec want_dweight(IC * OC), want_dbias(OC);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < OC; ++o) {
        want_dbias[o] += dout[n * OC + o];
        for (int64_t i = 0; i < IC; ++i)
          want_dweight[in_out ? i * OC + o : o * IC + i] += inp16[n * IC + i] * dout16[n * OC + o];
      }
    for (size_t i = 0; i < want_dinp.size(); ++i) want_dinp[i] += dinp0[i];
    for (size_t i = 0; i < want_dweight.size(); ++i) want_dweight[i] += dweight0[i];
    for (size_t i = 0; i < want_dbias.size(); ++i) want_dbias[i] += dbias0[i];
    EXPECT_LT(relative_error(dinp.host(), want_dinp), kForwardTolerance);
    EXPECT_LT(relative_error(dweight.host(), want_dweight), kForwardTolerance);
    EXPECT_LT(relative_error(dbias.host(), want_dbias), kForwardTolerance);
  }
}

// Only the GEMM slots differ from the fp32 table: norms, softmax, loss, the optimizer and the rest
// are the fp32 kernels themselves, and the memory is the same backend's.
TEST_P(Bf16Table, EveryOtherSlotIsTheFp32One) {
  const Kernels& bf16 = *GetParam().table;
  const Kernels* fp32 = nullptr;
  for (const Kernels* k : available_kernels())
    if (k->memory.device == bf16.memory.device) fp32 = k;
  ASSERT_NE(fp32, nullptr);
  EXPECT_EQ(std::string(bf16.name), std::string(fp32->name) + "-bf16");
  EXPECT_EQ(fp32->precision, Precision::FP32);
  EXPECT_EQ(bf16.memory.alloc, fp32->memory.alloc);
  EXPECT_TRUE(missing_kernel_slots(bf16).empty());
#define TESSEL_EXPECT_SAME_SLOT(op)                                         \
  if (std::string(#op) != "gemm" && std::string(#op) != "linear_forward" && \
      std::string(#op) != "linear_backward")                                \
    EXPECT_EQ(bf16.op, fp32->op) << #op;
  TESSEL_KERNEL_SLOTS(TESSEL_EXPECT_SAME_SLOT)
#undef TESSEL_EXPECT_SAME_SLOT
  EXPECT_NE(bf16.gemm, fp32->gemm);
  EXPECT_NE(bf16.linear_forward, fp32->linear_forward);
  EXPECT_NE(bf16.linear_backward, fp32->linear_backward);
}

INSTANTIATE_TEST_SUITE_P(Backends, Bf16Table, ::testing::ValuesIn(bf16_backends()),
                         [](const ::testing::TestParamInfo<Bf16Backend>& info) {
                           std::string name = info.param.table->name;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace tessel::testing
