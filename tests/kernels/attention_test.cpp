// Kernel cases: attention_forward / attention_backward (causal or full, grouped-query heads,
// fused or separate q/k/v with strided rows) against a naive double-precision attention with an
// explicit softmax (attention_reference.h), whose own backward is checked against central finite
// differences here.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/attention.h"
#include "kernels/harness.h"
#include "tessel/core/error.h"

namespace tessel::testing {
namespace {

// Forward and backward of the kernels against the reference; gradients start from random values
// (padding included) that must be added to, never overwritten.
void check_against_reference(const Kernels& k, const AttentionCase& c) {
  // Scores of a few units: peaked enough that masking and the max shift matter.
  std::vector<float> qkv = random_vector(c.size(), 1, 1.5f);
  std::vector<float> dout = random_vector(c.B * c.T * c.H * c.D, 2, 1.0f);
  std::vector<float> grad_init = random_vector(c.size(), 3, 1.0f);
  KernelRun run = run_kernels(k, c, qkv, dout, grad_init);

  std::vector<double> qkv_d(qkv.begin(), qkv.end()), dout_d(dout.begin(), dout.end());
  std::vector<double> out_ref, lse_ref;
  reference_forward(c, qkv_d, out_ref, lse_ref);
  EXPECT_LT(max_relative_error(run.out, out_ref), 1e-5);
  EXPECT_LT(max_relative_error(run.lse, lse_ref), 1e-5);

  std::vector<double> grad_ref = reference_backward(c, qkv_d, dout_d);
  for (size_t i = 0; i < grad_ref.size(); ++i) grad_ref[i] += grad_init[i];
  EXPECT_LT(max_relative_error(run.grad, grad_ref), 1e-5);
  // Padding belongs to no head: it keeps its starting value exactly.
  std::vector<bool> owned(c.size(), false);
  for (int64_t row = 0; row < c.B * c.T; ++row) {
    std::fill_n(owned.begin() + c.q_off() + row * c.q_ld(), c.H * c.D, true);
    std::fill_n(owned.begin() + c.k_off() + row * c.k_ld(), c.G * c.D, true);
    std::fill_n(owned.begin() + c.v_off() + row * c.v_ld(), c.G * c.D, true);
  }
  for (int64_t i = 0; i < c.size(); ++i) {
    if (owned[i]) continue;
    ASSERT_EQ(run.grad[i], grad_init[i]) << "padding element " << i;
  }
}

// The reference itself (no backend): its backward against central differences of Σ out · w.
TEST(Attention, ReferenceBackwardMatchesFiniteDifferences) {
  for (bool causal : {false, true}) {
    AttentionCase c{.B = 2, .T = 5, .H = 4, .G = 2, .D = 3, .causal = causal, .fused = true};
    std::vector<float> init = random_vector(c.size(), 4, 1.5f);
    std::vector<float> w = random_vector(c.B * c.T * c.H * c.D, 5, 1.0f);
    std::vector<double> qkv(init.begin(), init.end()), w_d(w.begin(), w.end());
    std::vector<double> grad = reference_backward(c, qkv, w_d);
    const double eps = 1e-5;
    for (int64_t i = 0; i < c.size(); ++i) {
      const double saved = qkv[i];
      qkv[i] = saved + eps;
      const double plus = reference_objective(c, qkv, w_d);
      qkv[i] = saved - eps;
      const double minus = reference_objective(c, qkv, w_d);
      qkv[i] = saved;
      EXPECT_NEAR(grad[i], (plus - minus) / (2 * eps), 1e-7 * std::max(1.0, std::abs(grad[i])))
          << "element " << i << (causal ? " causal" : "");
    }
  }
}

// The float kernels directly against finite differences of the double reference, at sampled
// entries of a case that spans several query blocks.
void kernel_backward_matches_finite_differences(const Kernels& k) {
  AttentionCase c{.B = 1, .T = 70, .H = 2, .G = 1, .D = 8, .causal = true, .fused = true};
  std::vector<float> qkv = random_vector(c.size(), 6, 1.5f);
  std::vector<float> w = random_vector(c.B * c.T * c.H * c.D, 7, 1.0f);
  KernelRun run = run_kernels(k, c, qkv, w, std::vector<float>(c.size(), 0.0f));
  std::vector<double> qkv_d(qkv.begin(), qkv.end()), w_d(w.begin(), w.end());
  double max_grad = 0;
  for (float g : run.grad) max_grad = std::max(max_grad, static_cast<double>(std::abs(g)));
  const double eps = 1e-4;
  for (int64_t sample = 0; sample < 90; ++sample) {
    const int64_t i = random_bits(8, 0, sample) % c.size();
    const double saved = qkv_d[i];
    qkv_d[i] = saved + eps;
    const double plus = reference_objective(c, qkv_d, w_d);
    qkv_d[i] = saved - eps;
    const double minus = reference_objective(c, qkv_d, w_d);
    qkv_d[i] = saved;
    EXPECT_NEAR(run.grad[i], (plus - minus) / (2 * eps), 1e-4 * max_grad) << "element " << i;
  }
}

void multi_head_separate_buffers(const Kernels& k) {
  for (bool causal : {false, true})
    check_against_reference(
        k, {.B = 2, .T = 70, .H = 3, .G = 3, .D = 16, .causal = causal, .fused = false, .pad = 5});
}

void grouped_query_fused_qkv(const Kernels& k) {
  for (bool causal : {false, true})
    check_against_reference(
        k, {.B = 2, .T = 130, .H = 4, .G = 2, .D = 8, .causal = causal, .fused = true, .pad = 3});
}

void multi_query_fused_qkv(const Kernels& k) {
  for (bool causal : {false, true})
    check_against_reference(
        k, {.B = 1, .T = 67, .H = 4, .G = 1, .D = 32, .causal = causal, .fused = true});
}

// GPT-2's c_attn output: (B, T, 3C) with q, k, v each C = H·D wide.
void gpt2_fused_qkv(const Kernels& k) {
  for (bool causal : {false, true})
    check_against_reference(
        k, {.B = 2, .T = 64, .H = 2, .G = 2, .D = 24, .causal = causal, .fused = true});
}

void single_token(const Kernels& k) {
  check_against_reference(k,
                          {.B = 3, .T = 1, .H = 2, .G = 1, .D = 4, .causal = true, .fused = true});
}

void null_gradients_are_skipped(const Kernels& k) {
  AttentionCase c{.B = 1, .T = 20, .H = 2, .G = 2, .D = 8, .causal = true, .fused = false};
  std::vector<float> qkv = random_vector(c.size(), 9, 1.0f);
  std::vector<float> dout = random_vector(c.B * c.T * c.H * c.D, 10, 1.0f);
  KernelRun full = run_kernels(k, c, qkv, dout, std::vector<float>(c.size(), 0.0f));
  const FloatBuffer d_qkv(k, qkv), d_dout(k, dout), out(k, full.out), lse(k, full.lse);
  FloatBuffer dv(k, c.B * c.T * c.v_ld());
  const float* base = d_qkv.data();
  k.attention_backward(nullptr, nullptr, dv.data(), d_dout.data(), base + c.q_off(),
                       base + c.k_off(), base + c.v_off(), out.data(), lse.data(), c.B, c.T, c.H,
                       c.G, c.D, c.q_ld(), c.k_ld(), c.v_ld(), c.causal, tessel::DropoutSite{});
  const std::vector<float> got = dv.host();
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], full.grad[c.v_off() + i]) << i;
}

// With fewer (batch, kv head) pairs than threads the backward splits a pair's query heads and
// blocks over several tasks with private partial sums of dk and dv.
void backward_split_across_threads(const Kernels& k) {
  for (int threads : {1, 3, 8}) {
    ThreadCount scope(threads);
    check_against_reference(
        k, {.B = 1, .T = 150, .H = 2, .G = 1, .D = 8, .causal = true, .fused = true, .pad = 2});
  }
}

void repeated_calls_are_bitwise_identical(const Kernels& k) {
  ThreadCount scope(4);
  // 8 (batch, kv head) pairs, then 1 pair split over the threads.
  for (AttentionCase c :
       {AttentionCase{.B = 2, .T = 200, .H = 4, .G = 4, .D = 32, .causal = true, .fused = true},
        AttentionCase{.B = 1, .T = 200, .H = 4, .G = 1, .D = 32, .causal = true, .fused = true}}) {
    std::vector<float> qkv = random_vector(c.size(), 11, 1.0f);
    std::vector<float> dout = random_vector(c.B * c.T * c.H * c.D, 12, 1.0f);
    std::vector<float> zeros(c.size(), 0.0f);
    KernelRun first = run_kernels(k, c, qkv, dout, zeros);
    KernelRun second = run_kernels(k, c, qkv, dout, zeros);
    EXPECT_EQ(std::memcmp(first.out.data(), second.out.data(), first.out.size() * 4), 0);
    EXPECT_EQ(std::memcmp(first.lse.data(), second.lse.data(), first.lse.size() * 4), 0);
    EXPECT_EQ(std::memcmp(first.grad.data(), second.grad.data(), first.grad.size() * 4), 0);
  }
}

// A NaN in a query reaches that query's output instead of being masked away by the softmax.
void nan_in_query_propagates(const Kernels& k) {
  AttentionCase c{.B = 1, .T = 40, .H = 2, .G = 1, .D = 8, .causal = true, .fused = true};
  std::vector<float> qkv = random_vector(c.size(), 13, 1.0f);
  const int64_t t = 33, h = 1;
  qkv[c.q_off() + t * c.q_ld() + h * c.D + 2] = NAN;
  const FloatBuffer d_qkv(k, qkv);
  FloatBuffer d_out(k, c.B * c.T * c.H * c.D), d_lse(k, c.B * c.H * c.T);
  const float* base = d_qkv.data();
  k.attention_forward(d_out.data(), d_lse.data(), base + c.q_off(), base + c.k_off(),
                      base + c.v_off(), c.B, c.T, c.H, c.G, c.D, c.q_ld(), c.k_ld(), c.v_ld(),
                      c.causal, tessel::DropoutSite{});
  const std::vector<float> out = d_out.host(), lse = d_lse.host();
  EXPECT_TRUE(std::isnan(lse[h * c.T + t]));
  EXPECT_TRUE(std::isnan(out[t * c.H * c.D + h * c.D]));
  EXPECT_FALSE(std::isnan(out[(t - 1) * c.H * c.D + h * c.D]));
}

void bad_shapes_throw(const Kernels& k) {
  FloatBuffer buf(k, 4 * 3 * 8);
  float* p = buf.data();
  // 3 query heads cannot share 2 kv heads
  EXPECT_THROW(k.attention_forward(p, p, p, p, p, 1, 2, 3, 2, 4, 12, 8, 8, false, tessel::DropoutSite{}), Error);
  // q rows hold 2 heads of 4 but claim a stride of 6
  EXPECT_THROW(k.attention_forward(p, p, p, p, p, 1, 2, 2, 2, 4, 6, 8, 8, false, tessel::DropoutSite{}), Error);
  EXPECT_THROW(k.attention_backward(p, p, p, p, p, p, p, p, p, 1, 2, 2, 1, 4, 8, 3, 4, true, tessel::DropoutSite{}),
               Error);
}

const std::vector<std::string> kBoth = {"attention_forward", "attention_backward"};

const bool kRegistered = add_kernel_cases({
    {"attention_kernel_backward_matches_finite_differences", kBoth,
     kernel_backward_matches_finite_differences},
    {"attention_multi_head_separate_buffers", kBoth, multi_head_separate_buffers},
    {"attention_grouped_query_fused_qkv", kBoth, grouped_query_fused_qkv},
    {"attention_multi_query_fused_qkv", kBoth, multi_query_fused_qkv},
    {"attention_gpt2_fused_qkv", kBoth, gpt2_fused_qkv},
    {"attention_single_token", kBoth, single_token},
    {"attention_null_gradients_are_skipped", kBoth, null_gradients_are_skipped},
    {"attention_backward_split_across_threads", kBoth, backward_split_across_threads},
    {"attention_repeated_calls_are_bitwise_identical", kBoth, repeated_calls_are_bitwise_identical},
    {"attention_nan_in_query_propagates", {"attention_forward"}, nan_in_query_propagates},
    {"attention_bad_shapes_throw", kBoth, bad_shapes_throw},
});

}  // namespace
}  // namespace tessel::testing
