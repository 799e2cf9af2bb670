// Kernel cases: the linear layer in both weight layouts, the bias alone (row-parallel layers),
// and the GEMM under them with its profiling counters.
#include <fmt/format.h>

#include <cstring>
#include <string>

#include "kernels/harness.h"
#include "support/reference.h"

namespace tessel::testing {
namespace {

void linear(const Kernels& k) {
  const int64_t N = 5, IC = 19, OC = 23;
  const Floats inp = random_floats(N * IC, 60), weight = random_floats(IC * OC, 61, 0.3f);
  const Floats bias = random_floats(OC, 62), w = random_floats(N * OC, 63);
  const FloatBuffer d_inp(k, inp), d_weight(k, weight), d_bias(k, bias), d_w(k, w);
  for (WeightLayout layout : {WeightLayout::InOut, WeightLayout::OutIn}) {
    const bool in_out = layout == WeightLayout::InOut;
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(std::string(in_out ? "InOut" : "OutIn") + (with_bias ? ", bias" : ", no bias"));
      FloatBuffer out(k, N * OC, 7.0f);  // forward overwrites
      k.linear_forward(out.data(), d_inp.data(), d_weight.data(),
                       with_bias ? d_bias.data() : nullptr, N, IC, OC, layout);
      const Vec bias64 = with_bias ? to_double(bias) : Vec();
      EXPECT_LT(relative_error(out.host(), ref::linear(to_double(inp), to_double(weight), bias64,
                                                       N, IC, OC, in_out)),
                kForwardTolerance);

      std::vector<Floats> inputs = {inp, weight};
      if (with_bias) inputs.push_back(bias);
      check_backward(
          k,
          [&](const std::vector<Vec>& in) {
            return ref::linear(in[0], in[1], with_bias ? in[2] : Vec(), N, IC, OC, in_out);
          },
          inputs, to_double(w),
          [&](const std::vector<float*>& g) {
            k.linear_backward(g[0], g[1], with_bias ? g[2] : nullptr, d_w.data(), d_inp.data(),
                              d_weight.data(), N, IC, OC, layout);
          });
    }
  }
}

// out (N, OC) += bias; dbias += Σ_n dout[n], the same bits for any thread count.
void bias(const Kernels& k) {
  const int64_t N = 301, OC = 150;  // columns over several of the backward's blocks
  const Floats out0 = random_floats(N * OC, 64), bias = random_floats(OC, 65);
  const Floats w = random_floats(N * OC, 66);
  const FloatBuffer d_w(k, w);
  FloatBuffer out(k, out0);
  const FloatBuffer d_bias(k, bias);
  const auto reference = [&](const std::vector<Vec>& in) {
    Vec r = to_double(out0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < OC; ++j) r[n * OC + j] += in[0][j];
    return r;
  };
  k.bias_forward(out.data(), d_bias.data(), N, OC);
  EXPECT_LT(relative_error(out.host(), reference({to_double(bias)})), kForwardTolerance);
  check_backward(k, reference, {bias}, to_double(w), [&](const std::vector<float*>& g) {
    k.bias_backward(g[0], d_w.data(), N, OC);
  });

  FloatBuffer first(k, OC);
  k.bias_backward(first.data(), d_w.data(), N, OC);
  for (int threads : {1, 3}) {
    ThreadCount scope(threads);
    FloatBuffer again(k, OC);
    k.bias_backward(again.data(), d_w.data(), N, OC);
    EXPECT_EQ(again.host(), first.host()) << threads << " threads";
  }
}

// C = alpha · op(A) · op(B) + beta · C for every transpose pair, with padded leading dimensions
// (the padding must stay as it was) and M, N, K not multiples of a vector width; on the backend's
// fp32 table and on its bf16 and fp16 twins (--bf16, --fp16), whose result is the product of the
// operands rounded to bf16 or fp16 within fp32 accumulation's error — measurably not the fp32
// product (the rounding is there), but within bf16's precision of it.
void gemm(const Kernels& k) {
  const Kernels &bf16 = kernels_for(k.memory.device, Precision::BF16),
                &fp16 = kernels_for(k.memory.device, Precision::FP16);
  for (const Kernels* table : {&k, &bf16, &fp16}) {
    const bool rounds = table->precision != Precision::FP32;
    const int64_t M = 37, N = 29, K = rounds ? 300 : 45, pad = 3;
    const float alpha = 0.75f, beta = -0.5f;
    for (bool trans_a : {false, true})
      for (bool trans_b : {false, true}) {
        SCOPED_TRACE(std::string(table->name) + (trans_a ? " T" : " N") + (trans_b ? "T" : "N"));
        const int64_t a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;
        const int64_t b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
        const int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = N + pad;
        const Floats a = random_floats(a_rows * lda, 70), b = random_floats(b_rows * ldb, 71);
        const Floats c0 = random_floats(M * ldc, 72);
        const FloatBuffer d_a(k, a), d_b(k, b);
        FloatBuffer c(k, c0);
        table->gemm(trans_a, trans_b, M, N, K, alpha, d_a.data(), lda, d_b.data(), ldb, beta,
                    c.data(), ldc);
        const Floats got = c.host();
        Floats inside;
        for (int64_t i = 0; i < M; ++i) {
          for (int64_t j = 0; j < N; ++j) inside.push_back(got[i * ldc + j]);
          for (int64_t j = N; j < ldc; ++j) EXPECT_EQ(got[i * ldc + j], c0[i * ldc + j]);
        }
        const Vec fp32 = ref::gemm(trans_a, trans_b, M, N, K, alpha, a, lda, b, ldb, beta, c0, ldc);
        if (!rounds) {
          EXPECT_LT(max_relative_error(inside, fp32), kForwardTolerance);
          continue;
        }
        EXPECT_LT(max_relative_error(inside, ref::gemm(trans_a, trans_b, M, N, K, alpha,
                                                       rounded_as(table->precision, a), lda,
                                                       rounded_as(table->precision, b), ldb, beta, c0, ldc)),
                  kForwardTolerance);
        EXPECT_GT(max_relative_error(inside, fp32), 1e-4) << "the operands were not rounded";
        EXPECT_LT(max_relative_error(inside, fp32), kBf16Tolerance);
      }
  }
}

// B's rows a multiple of 2 KiB apart, where the AVX2 build copies B to another stride before
// oneDNN's sgemm (cpu/gemm.cpp): the product is the same, for N short of the stride and for N
// itself a multiple of 512 (the copy's stride is then padded), with both transposes of A.
void gemm_b_rows_2kib_apart(const Kernels& k) {
  for (const int64_t N : {int64_t{200}, int64_t{512}}) {
    const int64_t M = 96, K = 40, ldb = 1024, ldc = N;
    for (bool trans_a : {false, true}) {
      SCOPED_TRACE(fmt::format("N {} {}", N, trans_a ? "TN" : "NN"));
      const int64_t lda = trans_a ? M : K;
      const Floats a = random_floats(M * K, 75), b = random_floats(K * ldb, 76), c0 = random_floats(M * N, 77);
      const FloatBuffer d_a(k, a), d_b(k, b);
      FloatBuffer c(k, c0);
      k.gemm(trans_a, false, M, N, K, 1.0f, d_a.data(), lda, d_b.data(), ldb, 1.0f, c.data(), ldc);
      EXPECT_LT(max_relative_error(c.host(), ref::gemm(trans_a, false, M, N, K, 1.0f, a, lda, b, ldb,
                                                       1.0f, c0, ldc)),
                kForwardTolerance);
      EXPECT_EQ(d_b.host(), b) << "B is read only";
    }
  }
}

// The profiling counters: 2·M·N·K floating-point operations and one call per gemm while
// enabled, nothing while disabled, zero after a reset.
void gemm_stats(const Kernels& k) {
  const int64_t M = 8, N = 6, K = 5;
  const FloatBuffer a(k, random_floats(M * K, 73)), b(k, random_floats(K * N, 74));
  FloatBuffer c(k, M * N);
  const auto multiply = [&] {
    k.gemm(false, false, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, c.data(), N);
  };
  k.gemm_stats_enable(true);
  k.gemm_stats_reset();
  multiply();
  multiply();
  GemmStats stats = k.gemm_stats();
  EXPECT_EQ(stats.calls, 2);
  EXPECT_EQ(stats.flops, 2.0 * 2 * M * N * K);
  EXPECT_GE(stats.seconds, 0.0);
  k.gemm_stats_enable(false);
  multiply();
  EXPECT_EQ(k.gemm_stats().calls, 2);
  k.gemm_stats_reset();
  stats = k.gemm_stats();
  EXPECT_EQ(stats.calls, 0);
  EXPECT_EQ(stats.flops, 0.0);
  EXPECT_EQ(stats.seconds, 0.0);
}

const bool kRegistered = add_kernel_cases({
    {"linear", {"linear_forward", "linear_backward"}, linear},
    {"bias", {"bias_forward", "bias_backward"}, bias},
    {"gemm", {"gemm"}, gemm},
    {"gemm_b_rows_2kib_apart", {"gemm"}, gemm_b_rows_2kib_apart},
    {"gemm_stats", {"gemm_stats_enable", "gemm_stats", "gemm_stats_reset"}, gemm_stats},
});

}  // namespace
}  // namespace tessel::testing
