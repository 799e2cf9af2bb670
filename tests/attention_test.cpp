// attention_forward / attention_backward against a naive double-precision attention with an
// explicit softmax, whose own backward is checked against central finite differences.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/core/philox.h"
#include "tessel/kernels/cpu/kernels.h"

namespace tessel::cpu {
namespace {

// Where q, k and v live inside one buffer: either three separate regions or views into fused
// rows (B, T, width) — Llama's (H+2G)·D or GPT-2's 3C. `pad` extra floats end every row, so a
// kernel that writes past its heads is caught.
struct AttentionCase {
  int64_t B, T, H, G, D;
  bool causal;
  bool fused;
  int64_t pad = 0;

  int64_t q_ld() const { return fused ? (H + 2 * G) * D + pad : H * D + pad; }
  int64_t k_ld() const { return fused ? q_ld() : G * D + pad; }
  int64_t v_ld() const { return k_ld(); }
  int64_t q_off() const { return 0; }
  int64_t k_off() const { return fused ? H * D : B * T * q_ld(); }
  int64_t v_off() const { return fused ? (H + G) * D : k_off() + B * T * k_ld(); }
  int64_t size() const { return fused ? B * T * q_ld() : v_off() + B * T * v_ld(); }
};

// Sets the OpenMP thread count for one scope.
class ThreadCount {
 public:
  explicit ThreadCount(int threads) : saved_(omp_get_max_threads()) {
    omp_set_num_threads(threads);
  }
  ~ThreadCount() { omp_set_num_threads(saved_); }

 private:
  int saved_;
};

std::vector<float> random_vector(int64_t n, uint64_t stream, float scale) {
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = scale * random_normal(42, stream, i);
  return x;
}

// ---- the double-precision reference ------------------------------------------------------------

// Probabilities of query (b, t, h) over keys 0..visible-1, and the row's log-sum-exp.
std::vector<double> reference_probs(const AttentionCase& c, const std::vector<double>& qkv,
                                    int64_t b, int64_t t, int64_t h, double* lse) {
  const int64_t g = h / (c.H / c.G);
  const int64_t visible = c.causal ? t + 1 : c.T;
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.D));
  std::vector<double> p(visible);
  const double* qr = &qkv[c.q_off() + (b * c.T + t) * c.q_ld() + h * c.D];
  for (int64_t s = 0; s < visible; ++s) {
    const double* kr = &qkv[c.k_off() + (b * c.T + s) * c.k_ld() + g * c.D];
    double dot = 0;
    for (int64_t d = 0; d < c.D; ++d) dot += qr[d] * kr[d];
    p[s] = scale * dot;
  }
  double max = *std::max_element(p.begin(), p.end());
  double sum = 0;
  for (double& x : p) sum += std::exp(x - max);
  *lse = max + std::log(sum);
  for (double& x : p) x = std::exp(x - *lse);
  return p;
}

// out (B, T, H·D), lse (B, H, T)
void reference_forward(const AttentionCase& c, const std::vector<double>& qkv,
                       std::vector<double>& out, std::vector<double>& lse) {
  out.assign(c.B * c.T * c.H * c.D, 0.0);
  lse.assign(c.B * c.H * c.T, 0.0);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h)
      for (int64_t t = 0; t < c.T; ++t) {
        const int64_t g = h / (c.H / c.G);
        std::vector<double> p = reference_probs(c, qkv, b, t, h, &lse[(b * c.H + h) * c.T + t]);
        double* o = &out[(b * c.T + t) * c.H * c.D + h * c.D];
        for (size_t s = 0; s < p.size(); ++s) {
          const double* vr = &qkv[c.v_off() + (b * c.T + s) * c.v_ld() + g * c.D];
          for (int64_t d = 0; d < c.D; ++d) o[d] += p[s] * vr[d];
        }
      }
}

// Σ out·w, the objective whose gradient the backward computes when dout = w.
double reference_objective(const AttentionCase& c, const std::vector<double>& qkv,
                           const std::vector<double>& w) {
  std::vector<double> out, lse;
  reference_forward(c, qkv, out, lse);
  double sum = 0;
  for (size_t i = 0; i < out.size(); ++i) sum += out[i] * w[i];
  return sum;
}

// Gradient of Σ out·dout with respect to the q, k and v entries of the buffer (padding stays 0):
// explicit softmax backward, dS = P ∘ (dP - Σ_s P·dP).
std::vector<double> reference_backward(const AttentionCase& c, const std::vector<double>& qkv,
                                       const std::vector<double>& dout) {
  std::vector<double> grad(c.size(), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.D));
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h)
      for (int64_t t = 0; t < c.T; ++t) {
        const int64_t g = h / (c.H / c.G);
        double lse;
        std::vector<double> p = reference_probs(c, qkv, b, t, h, &lse);
        const double* dO = &dout[(b * c.T + t) * c.H * c.D + h * c.D];
        const int64_t qi = c.q_off() + (b * c.T + t) * c.q_ld() + h * c.D;
        std::vector<double> dp(p.size());
        double p_dot_dp = 0;
        for (size_t s = 0; s < p.size(); ++s) {
          const double* vr = &qkv[c.v_off() + (b * c.T + s) * c.v_ld() + g * c.D];
          dp[s] = 0;
          for (int64_t d = 0; d < c.D; ++d) dp[s] += dO[d] * vr[d];
          p_dot_dp += p[s] * dp[s];
        }
        for (size_t s = 0; s < p.size(); ++s) {
          const int64_t ki = c.k_off() + (b * c.T + s) * c.k_ld() + g * c.D;
          const int64_t vi = c.v_off() + (b * c.T + s) * c.v_ld() + g * c.D;
          const double ds = p[s] * (dp[s] - p_dot_dp);
          for (int64_t d = 0; d < c.D; ++d) {
            grad[qi + d] += scale * ds * qkv[ki + d];
            grad[ki + d] += scale * ds * qkv[qi + d];
            grad[vi + d] += p[s] * dO[d];
          }
        }
      }
  return grad;
}

// max |a - ref| / max(1, max |ref|)
double max_relative_error(const std::vector<float>& a, const std::vector<double>& ref) {
  double err = 0, scale = 1;
  for (size_t i = 0; i < ref.size(); ++i) {
    err = std::max(err, std::abs(a[i] - ref[i]));
    scale = std::max(scale, std::abs(ref[i]));
  }
  return err / scale;
}

// ---- the kernels on one case -------------------------------------------------------------------

struct KernelRun {
  std::vector<float> out, lse, grad;  // grad: the qkv buffer's layout, starting from grad_init
};

KernelRun run_kernels(const AttentionCase& c, const std::vector<float>& qkv,
                      const std::vector<float>& dout, const std::vector<float>& grad_init) {
  KernelRun run;
  run.out.assign(c.B * c.T * c.H * c.D, 0.0f);
  run.lse.assign(c.B * c.H * c.T, 0.0f);
  run.grad = grad_init;
  const float* base = qkv.data();
  attention_forward(run.out.data(), run.lse.data(), base + c.q_off(), base + c.k_off(),
                    base + c.v_off(), c.B, c.T, c.H, c.G, c.D, c.q_ld(), c.k_ld(), c.v_ld(),
                    c.causal);
  float* g = run.grad.data();
  attention_backward(g + c.q_off(), g + c.k_off(), g + c.v_off(), dout.data(), base + c.q_off(),
                     base + c.k_off(), base + c.v_off(), run.out.data(), run.lse.data(), c.B, c.T,
                     c.H, c.G, c.D, c.q_ld(), c.k_ld(), c.v_ld(), c.causal);
  return run;
}

// Forward and backward of the kernels against the reference; gradients start from random values
// (padding included) that must be added to, never overwritten.
void check_against_reference(const AttentionCase& c) {
  // Scores of a few units: peaked enough that masking and the max shift matter.
  std::vector<float> qkv = random_vector(c.size(), 1, 1.5f);
  std::vector<float> dout = random_vector(c.B * c.T * c.H * c.D, 2, 1.0f);
  std::vector<float> grad_init = random_vector(c.size(), 3, 1.0f);
  KernelRun run = run_kernels(c, qkv, dout, grad_init);

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
TEST(Attention, KernelBackwardMatchesFiniteDifferences) {
  AttentionCase c{.B = 1, .T = 70, .H = 2, .G = 1, .D = 8, .causal = true, .fused = true};
  std::vector<float> qkv = random_vector(c.size(), 6, 1.5f);
  std::vector<float> w = random_vector(c.B * c.T * c.H * c.D, 7, 1.0f);
  KernelRun run = run_kernels(c, qkv, w, std::vector<float>(c.size(), 0.0f));
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

TEST(Attention, MultiHeadSeparateBuffers) {
  for (bool causal : {false, true})
    check_against_reference(
        {.B = 2, .T = 70, .H = 3, .G = 3, .D = 16, .causal = causal, .fused = false, .pad = 5});
}

TEST(Attention, GroupedQueryFusedQkv) {
  for (bool causal : {false, true})
    check_against_reference(
        {.B = 2, .T = 130, .H = 4, .G = 2, .D = 8, .causal = causal, .fused = true, .pad = 3});
}

TEST(Attention, MultiQueryFusedQkv) {
  for (bool causal : {false, true})
    check_against_reference(
        {.B = 1, .T = 67, .H = 4, .G = 1, .D = 32, .causal = causal, .fused = true});
}

// GPT-2's c_attn output: (B, T, 3C) with q, k, v each C = H·D wide.
TEST(Attention, Gpt2FusedQkv) {
  for (bool causal : {false, true})
    check_against_reference(
        {.B = 2, .T = 64, .H = 2, .G = 2, .D = 24, .causal = causal, .fused = true});
}

TEST(Attention, SingleToken) {
  check_against_reference({.B = 3, .T = 1, .H = 2, .G = 1, .D = 4, .causal = true, .fused = true});
}

TEST(Attention, NullGradientsAreSkipped) {
  AttentionCase c{.B = 1, .T = 20, .H = 2, .G = 2, .D = 8, .causal = true, .fused = false};
  std::vector<float> qkv = random_vector(c.size(), 9, 1.0f);
  std::vector<float> dout = random_vector(c.B * c.T * c.H * c.D, 10, 1.0f);
  KernelRun full = run_kernels(c, qkv, dout, std::vector<float>(c.size(), 0.0f));
  std::vector<float> dv(c.B * c.T * c.v_ld(), 0.0f);
  const float* base = qkv.data();
  attention_backward(nullptr, nullptr, dv.data(), dout.data(), base + c.q_off(), base + c.k_off(),
                     base + c.v_off(), full.out.data(), full.lse.data(), c.B, c.T, c.H, c.G, c.D,
                     c.q_ld(), c.k_ld(), c.v_ld(), c.causal);
  for (size_t i = 0; i < dv.size(); ++i) ASSERT_EQ(dv[i], full.grad[c.v_off() + i]) << i;
}

// With fewer (batch, kv head) pairs than threads the backward splits a pair's query heads and
// blocks over several tasks with private partial sums of dk and dv.
TEST(Attention, BackwardSplitAcrossThreads) {
  for (int threads : {1, 3, 8}) {
    ThreadCount scope(threads);
    check_against_reference(
        {.B = 1, .T = 150, .H = 2, .G = 1, .D = 8, .causal = true, .fused = true, .pad = 2});
  }
}

TEST(Attention, RepeatedCallsAreBitwiseIdentical) {
  ThreadCount scope(4);
  // 8 (batch, kv head) pairs, then 1 pair split over the threads.
  for (AttentionCase c :
       {AttentionCase{.B = 2, .T = 200, .H = 4, .G = 4, .D = 32, .causal = true, .fused = true},
        AttentionCase{.B = 1, .T = 200, .H = 4, .G = 1, .D = 32, .causal = true, .fused = true}}) {
    std::vector<float> qkv = random_vector(c.size(), 11, 1.0f);
    std::vector<float> dout = random_vector(c.B * c.T * c.H * c.D, 12, 1.0f);
    std::vector<float> zeros(c.size(), 0.0f);
    KernelRun first = run_kernels(c, qkv, dout, zeros);
    KernelRun second = run_kernels(c, qkv, dout, zeros);
    EXPECT_EQ(std::memcmp(first.out.data(), second.out.data(), first.out.size() * 4), 0);
    EXPECT_EQ(std::memcmp(first.lse.data(), second.lse.data(), first.lse.size() * 4), 0);
    EXPECT_EQ(std::memcmp(first.grad.data(), second.grad.data(), first.grad.size() * 4), 0);
  }
}

// A NaN in a query reaches that query's output instead of being masked away by the softmax.
TEST(Attention, NanInQueryPropagates) {
  AttentionCase c{.B = 1, .T = 40, .H = 2, .G = 1, .D = 8, .causal = true, .fused = true};
  std::vector<float> qkv = random_vector(c.size(), 13, 1.0f);
  const int64_t t = 33, h = 1;
  qkv[c.q_off() + t * c.q_ld() + h * c.D + 2] = NAN;
  std::vector<float> out(c.B * c.T * c.H * c.D), lse(c.B * c.H * c.T);
  const float* base = qkv.data();
  attention_forward(out.data(), lse.data(), base + c.q_off(), base + c.k_off(), base + c.v_off(),
                    c.B, c.T, c.H, c.G, c.D, c.q_ld(), c.k_ld(), c.v_ld(), c.causal);
  EXPECT_TRUE(std::isnan(lse[h * c.T + t]));
  EXPECT_TRUE(std::isnan(out[t * c.H * c.D + h * c.D]));
  EXPECT_FALSE(std::isnan(out[(t - 1) * c.H * c.D + h * c.D]));
}

TEST(Attention, BadShapesThrow) {
  std::vector<float> buf(4 * 3 * 8, 0.0f);
  float* p = buf.data();
  // 3 query heads cannot share 2 kv heads
  EXPECT_THROW(attention_forward(p, p, p, p, p, 1, 2, 3, 2, 4, 12, 8, 8, false), Error);
  // q rows hold 2 heads of 4 but claim a stride of 6
  EXPECT_THROW(attention_forward(p, p, p, p, p, 1, 2, 2, 2, 4, 6, 8, 8, false), Error);
  EXPECT_THROW(attention_backward(p, p, p, p, p, p, p, p, p, 1, 2, 2, 1, 4, 8, 3, 4, true), Error);
}

}  // namespace
}  // namespace tessel::cpu
