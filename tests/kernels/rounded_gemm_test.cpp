// bf16 and fp16 mixed precision (--bf16, --fp16): the bf16 rounding (kernels/bf16.h; fp16's is
// fp16_test.cpp's) and every backend's bf16 and fp16 table — its linear layer against a
// double-precision reference over operands rounded to bf16 or fp16, within fp32 accumulation's
// 1e-5 (the gemm slot: linear_test.cpp's gemm case, on every table); every other slot the fp32
// table's own. On a machine with a GPU the CUDA tables (cuBLASLt bf16 and fp16 operands) run the
// same checks, so they are compared with the CPU's emulation of the same rounding. The suite's
// name has Kernel in it: bench/gpu.sh's GPU filter (*Kernel*) runs it.
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

// A backend's bf16 or fp16 table, printed by its name in test listings.
struct RoundedBackend {
  const Kernels* table;
};
void PrintTo(const RoundedBackend& b, std::ostream* os) { *os << b.table->name; }

std::vector<RoundedBackend> rounded_backends() {
  std::vector<RoundedBackend> all;
  for (Precision precision : {Precision::BF16, Precision::FP16})
    for (const Kernels* k : available_kernels(precision)) all.push_back({k});
  return all;
}

class RoundedKernelTable : public ::testing::TestWithParam<RoundedBackend> {};

// The linear layer in both layouts: forward over rounded input and weight (the bias added in
// fp32), the input gradient over rounded dout and weight, the weight gradient over rounded input
// and dout — accumulated into fp32 gradients — and the bias gradient from dout unrounded.
TEST_P(RoundedKernelTable, LinearLayerRoundsEveryProduct) {
  const Kernels& k = *GetParam().table;
  const int64_t N = 9, IC = 70, OC = 23;
  const Floats inp = random_floats(N * IC, 83), weight = random_floats(IC * OC, 84, 0.3f);
  const Floats bias = random_floats(OC, 85), dout = random_floats(N * OC, 86);
  const Vec inp16 = to_double(rounded_as(k.precision, inp)), weight16 = to_double(rounded_as(k.precision, weight));
  const Vec dout16 = to_double(rounded_as(k.precision, dout));
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
TEST_P(RoundedKernelTable, EveryOtherSlotIsTheFp32One) {
  const Kernels& rounded = *GetParam().table;
  const Kernels* fp32 = nullptr;
  for (const Kernels* k : available_kernels())
    if (k->memory.device == rounded.memory.device) fp32 = k;
  ASSERT_NE(fp32, nullptr);
  EXPECT_EQ(std::string(rounded.name),
            std::string(fp32->name) + (rounded.precision == Precision::FP16 ? "-fp16" : "-bf16"));
  EXPECT_EQ(fp32->precision, Precision::FP32);
  EXPECT_EQ(rounded.memory.alloc, fp32->memory.alloc);
  EXPECT_TRUE(missing_kernel_slots(rounded).empty());
#define TESSEL_EXPECT_SAME_SLOT(op)                                         \
  if (std::string(#op) != "gemm" && std::string(#op) != "linear_forward" && \
      std::string(#op) != "linear_backward") {                              \
    EXPECT_EQ(rounded.op, fp32->op) << #op;                                 \
  }
  TESSEL_KERNEL_SLOTS(TESSEL_EXPECT_SAME_SLOT)
#undef TESSEL_EXPECT_SAME_SLOT
  EXPECT_NE(rounded.gemm, fp32->gemm);
  EXPECT_NE(rounded.linear_forward, fp32->linear_forward);
  EXPECT_NE(rounded.linear_backward, fp32->linear_backward);
}

INSTANTIATE_TEST_SUITE_P(Backends, RoundedKernelTable, ::testing::ValuesIn(rounded_backends()),
                         [](const ::testing::TestParamInfo<RoundedBackend>& info) {
                           std::string name = info.param.table->name;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace tessel::testing
