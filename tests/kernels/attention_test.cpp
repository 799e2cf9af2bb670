// attention_forward / attention_backward against a naive double-precision attention with an
// explicit softmax, whose own backward is checked against central finite differences; the block
// kernels of context parallelism (keys visible by position) against the same reference with
// positions, and their partial results merged by log-sum-exp against one call over all keys.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
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

// ---- block attention: keys visible by position -------------------------------------------------

// q (B, Tq, H·D + pad), k and v (B, Tk, G·D + pad) in separate buffers; key s is visible to query
// t iff k_pos[s] ≤ q_pos[t].
struct BlockCase {
  int64_t B, Tq, Tk, H, G, D, pad;
  std::vector<int32_t> q_pos, k_pos;

  int64_t q_ld() const { return H * D + pad; }
  int64_t kv_ld() const { return G * D + pad; }
  int64_t q_size() const { return B * Tq * q_ld(); }
  int64_t kv_size() const { return B * Tk * kv_ld(); }
  int64_t out_size() const { return B * Tq * H * D; }
};

struct BlockInputs {
  std::vector<float> q, k, v, dout;
};

BlockInputs random_block_inputs(const BlockCase& c, uint64_t stream) {
  return {random_vector(c.q_size(), stream, 1.5f), random_vector(c.kv_size(), stream + 1, 1.5f),
          random_vector(c.kv_size(), stream + 2, 1.0f),
          random_vector(c.out_size(), stream + 3, 1.0f)};
}

// Outputs in the kernels' layouts; gradients of Σ out·dout in q, k and v's.
template <typename Real>
struct BlockResult {
  std::vector<Real> out, lse, dq, dk, dv;
};

// Naive double attention with positions; rows that see no key give out = 0, lse = -inf and no
// gradient.
BlockResult<double> block_reference(const BlockCase& c, const BlockInputs& x) {
  BlockResult<double> r;
  r.out.assign(c.out_size(), 0.0);
  r.lse.assign(c.B * c.H * c.Tq, -INFINITY);
  r.dq.assign(c.q_size(), 0.0);
  r.dk.assign(c.kv_size(), 0.0);
  r.dv.assign(c.kv_size(), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.D));
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h)
      for (int64_t t = 0; t < c.Tq; ++t) {
        const int64_t g = h / (c.H / c.G);
        const int64_t qi = (b * c.Tq + t) * c.q_ld() + h * c.D;
        const int64_t oi = (b * c.Tq + t) * c.H * c.D + h * c.D;
        std::vector<int64_t> keys;  // row offsets of the visible keys
        std::vector<double> p;
        for (int64_t s = 0; s < c.Tk; ++s) {
          if (c.k_pos[s] > c.q_pos[t]) continue;
          const int64_t ki = (b * c.Tk + s) * c.kv_ld() + g * c.D;
          double dot = 0;
          for (int64_t d = 0; d < c.D; ++d) dot += double{x.q[qi + d]} * x.k[ki + d];
          keys.push_back(ki);
          p.push_back(scale * dot);
        }
        if (keys.empty()) continue;
        const double max = *std::max_element(p.begin(), p.end());
        double sum = 0;
        for (double& e : p) sum += std::exp(e - max);
        const double lse = max + std::log(sum);
        r.lse[(b * c.H + h) * c.Tq + t] = lse;
        std::vector<double> dp(p.size());
        double p_dot_dp = 0;
        for (size_t j = 0; j < keys.size(); ++j) {
          p[j] = std::exp(p[j] - lse);
          dp[j] = 0;
          for (int64_t d = 0; d < c.D; ++d) {
            r.out[oi + d] += p[j] * x.v[keys[j] + d];
            dp[j] += double{x.dout[oi + d]} * x.v[keys[j] + d];
          }
          p_dot_dp += p[j] * dp[j];
        }
        for (size_t j = 0; j < keys.size(); ++j) {
          const double ds = p[j] * (dp[j] - p_dot_dp);
          for (int64_t d = 0; d < c.D; ++d) {
            r.dq[qi + d] += scale * ds * x.k[keys[j] + d];
            r.dk[keys[j] + d] += scale * ds * x.q[qi + d];
            r.dv[keys[j] + d] += p[j] * x.dout[oi + d];
          }
        }
      }
  return r;
}

// The block kernels, forward then backward with their own out and lse; gradients start from
// `init` (random, padding included), to be added to.
BlockResult<float> run_block_kernels(const BlockCase& c, const BlockInputs& x,
                                     const BlockResult<float>& init) {
  BlockResult<float> r = init;
  r.out.assign(c.out_size(), 0.0f);
  r.lse.assign(c.B * c.H * c.Tq, 0.0f);
  attention_block_forward(r.out.data(), r.lse.data(), x.q.data(), x.k.data(), x.v.data(), c.B, c.Tq,
                          c.Tk, c.H, c.G, c.D, c.q_ld(), c.kv_ld(), c.kv_ld(), c.q_pos.data(),
                          c.k_pos.data());
  attention_block_backward(r.dq.data(), r.dk.data(), r.dv.data(), x.dout.data(), x.q.data(),
                           x.k.data(), x.v.data(), r.out.data(), r.lse.data(), c.B, c.Tq, c.Tk, c.H,
                           c.G, c.D, c.q_ld(), c.kv_ld(), c.kv_ld(), c.q_pos.data(),
                           c.k_pos.data());
  return r;
}

BlockResult<float> random_gradients(const BlockCase& c, uint64_t stream) {
  return {{},
          {},
          random_vector(c.q_size(), stream, 1.0f),
          random_vector(c.kv_size(), stream + 1, 1.0f),
          random_vector(c.kv_size(), stream + 2, 1.0f)};
}

std::vector<double> plus(const std::vector<double>& a, const std::vector<float>& b) {
  std::vector<double> sum(a);
  for (size_t i = 0; i < b.size(); ++i) sum[i] += b[i];
  return sum;
}

// max relative error of lse over the rows that see keys; infinite where a row sees keys on one
// side only (lse = -inf on the other).
double lse_error(const std::vector<float>& lse, const std::vector<double>& ref) {
  std::vector<float> seen;
  std::vector<double> ref_seen;
  for (size_t i = 0; i < ref.size(); ++i) {
    if ((ref[i] == -INFINITY) != (lse[i] == -INFINITY)) return INFINITY;
    if (ref[i] == -INFINITY) continue;
    seen.push_back(lse[i]);
    ref_seen.push_back(ref[i]);
  }
  return max_relative_error(seen, ref_seen);
}

// The query rows that see no key: exactly out = 0 and lse = -inf there, the reference elsewhere.
void check_block_forward(const BlockCase& c, const BlockResult<float>& run,
                         const BlockResult<double>& ref) {
  EXPECT_LT(lse_error(run.lse, ref.lse), 1e-5);
  EXPECT_LT(max_relative_error(run.out, ref.out), 1e-5);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h)
      for (int64_t t = 0; t < c.Tq; ++t) {
        if (ref.lse[(b * c.H + h) * c.Tq + t] != -INFINITY) continue;
        for (int64_t d = 0; d < c.D; ++d)
          ASSERT_EQ(run.out[(b * c.Tq + t) * c.H * c.D + h * c.D + d], 0.0f) << "row " << t;
      }
}

void check_block_against_reference(const BlockCase& c, uint64_t stream) {
  const BlockInputs x = random_block_inputs(c, stream);
  const BlockResult<float> init = random_gradients(c, stream + 10);
  const BlockResult<float> run = run_block_kernels(c, x, init);
  const BlockResult<double> ref = block_reference(c, x);
  check_block_forward(c, run, ref);
  EXPECT_LT(max_relative_error(run.dq, plus(ref.dq, init.dq)), 1e-5);
  EXPECT_LT(max_relative_error(run.dk, plus(ref.dk, init.dk)), 1e-5);
  EXPECT_LT(max_relative_error(run.dv, plus(ref.dv, init.dv)), 1e-5);
}

std::vector<int32_t> random_positions(int64_t n, int32_t low, int32_t high, uint64_t stream) {
  std::vector<int32_t> positions(n);
  for (int64_t i = 0; i < n; ++i)
    positions[i] = low + static_cast<int32_t>(random_bits(21, stream, i) % (high - low));
  return positions;
}

// Positions [begin, end) of chunks c0 and c1, as one context-parallel rank holds them.
std::vector<int32_t> chunk_positions(int32_t chunk, int32_t c0, int32_t c1) {
  std::vector<int32_t> positions(2 * chunk);
  std::iota(positions.begin(), positions.begin() + chunk, c0 * chunk);
  std::iota(positions.begin() + chunk, positions.end(), c1 * chunk);
  return positions;
}

// The reference's gradients against central differences of Σ out·dout, on a small case with
// unsorted positions and rows that see no key.
TEST(BlockAttention, ReferenceBackwardMatchesFiniteDifferences) {
  BlockCase c{.B = 1,
              .Tq = 6,
              .Tk = 5,
              .H = 2,
              .G = 1,
              .D = 3,
              .pad = 1,
              .q_pos = {4, 0, 9, 2, 7, 3},
              .k_pos = {3, 8, 1, 6, 2}};
  BlockInputs x = random_block_inputs(c, 30);
  const BlockResult<double> ref = block_reference(c, x);
  auto objective = [&](const BlockInputs& at) {
    const BlockResult<double> r = block_reference(c, at);
    double sum = 0;
    for (size_t i = 0; i < r.out.size(); ++i) sum += r.out[i] * at.dout[i];
    return sum;
  };
  // float inputs: the step is a power of two, so x ± eps is exact
  const float eps = 1.0f / 512;
  for (auto [tensor, grad] : {std::pair{&x.q, &ref.dq}, {&x.k, &ref.dk}, {&x.v, &ref.dv}}) {
    for (size_t i = 0; i < tensor->size(); ++i) {
      const float saved = (*tensor)[i];
      (*tensor)[i] = saved + eps;
      const double up = objective(x);
      (*tensor)[i] = saved - eps;
      const double down = objective(x);
      (*tensor)[i] = saved;
      EXPECT_NEAR((*grad)[i], (up - down) / (2 * eps), 2e-4) << "element " << i;
    }
  }
}

// Unsorted query and key positions; query rows below every key position see nothing.
TEST(BlockAttention, ArbitraryPositions) {
  BlockCase c{.B = 2,
              .Tq = 70,
              .Tk = 45,
              .H = 4,
              .G = 2,
              .D = 8,
              .pad = 3,
              .q_pos = random_positions(70, 0, 40, 20),
              .k_pos = random_positions(45, 5, 60, 21)};
  const int32_t first_key = *std::min_element(c.k_pos.begin(), c.k_pos.end());
  ASSERT_GT(std::count_if(c.q_pos.begin(), c.q_pos.end(), [&](int32_t p) { return p < first_key; }),
            2);
  check_block_against_reference(c, 22);
}

// The blocks a context-parallel rank computes: its rows (chunks i and 2·CP−1−i) against each
// rank's keys. Sorted keys; some query blocks see no key, some every key, some a diagonal.
TEST(BlockAttention, ContextParallelChunkPairs) {
  const int32_t chunk = 80;  // query blocks of 64 + 16 rows on each side of the position jump
  const int cp = 2;
  for (int q_rank = 0; q_rank < cp; ++q_rank)
    for (int k_rank = 0; k_rank < cp; ++k_rank) {
      BlockCase c{.B = 2,
                  .Tq = 2 * chunk,
                  .Tk = 2 * chunk,
                  .H = 2,
                  .G = 1,
                  .D = 16,
                  .pad = 0,
                  .q_pos = chunk_positions(chunk, q_rank, 2 * cp - 1 - q_rank),
                  .k_pos = chunk_positions(chunk, k_rank, 2 * cp - 1 - k_rank)};
      check_block_against_reference(c, 40 + 10 * q_rank + k_rank);
    }
}

TEST(BlockAttention, NoVisibleKeyAnywhere) {
  BlockCase c{.B = 1,
              .Tq = 20,
              .Tk = 30,
              .H = 2,
              .G = 2,
              .D = 8,
              .pad = 0,
              .q_pos = random_positions(20, 0, 50, 50),
              .k_pos = random_positions(30, 50, 90, 51)};
  check_block_against_reference(c, 52);
}

// Positions 0..T-1 (or shifted alike) are attention_forward/backward's causal case, bit for bit.
TEST(BlockAttention, CausalPositionsEqualCausalKernel) {
  AttentionCase a{.B = 2, .T = 150, .H = 4, .G = 2, .D = 16, .causal = true, .fused = true};
  std::vector<float> qkv = random_vector(a.size(), 60, 1.5f);
  std::vector<float> dout = random_vector(a.B * a.T * a.H * a.D, 61, 1.0f);
  KernelRun causal = run_kernels(a, qkv, dout, std::vector<float>(a.size(), 0.0f));
  for (int32_t shift : {0, 1000}) {
    std::vector<int32_t> positions(a.T);
    std::iota(positions.begin(), positions.end(), shift);
    std::vector<float> out(causal.out.size()), lse(causal.lse.size()), grad(a.size(), 0.0f);
    const float* base = qkv.data();
    attention_block_forward(out.data(), lse.data(), base + a.q_off(), base + a.k_off(),
                            base + a.v_off(), a.B, a.T, a.T, a.H, a.G, a.D, a.q_ld(), a.k_ld(),
                            a.v_ld(), positions.data(), positions.data());
    float* g = grad.data();
    attention_block_backward(g + a.q_off(), g + a.k_off(), g + a.v_off(), dout.data(),
                             base + a.q_off(), base + a.k_off(), base + a.v_off(), out.data(),
                             lse.data(), a.B, a.T, a.T, a.H, a.G, a.D, a.q_ld(), a.k_ld(), a.v_ld(),
                             positions.data(), positions.data());
    EXPECT_EQ(std::memcmp(out.data(), causal.out.data(), out.size() * 4), 0) << "shift " << shift;
    EXPECT_EQ(std::memcmp(lse.data(), causal.lse.data(), lse.size() * 4), 0) << "shift " << shift;
    EXPECT_EQ(std::memcmp(grad.data(), causal.grad.data(), grad.size() * 4), 0)
        << "shift " << shift;
  }
}

// The keys of `c` from row `begin` on, `count` of them, as a case of their own.
BlockCase key_slice(const BlockCase& c, const BlockInputs& x, int64_t begin, int64_t count,
                    BlockInputs* slice) {
  BlockCase part = c;
  part.Tk = count;
  part.k_pos.assign(c.k_pos.begin() + begin, c.k_pos.begin() + begin + count);
  *slice = x;
  slice->k.assign(part.kv_size(), 0.0f);
  slice->v.assign(part.kv_size(), 0.0f);
  for (int64_t b = 0; b < c.B; ++b) {
    const int64_t from = (b * c.Tk + begin) * c.kv_ld(), to = b * count * c.kv_ld();
    std::copy_n(x.k.begin() + from, count * c.kv_ld(), slice->k.begin() + to);
    std::copy_n(x.v.begin() + from, count * c.kv_ld(), slice->v.begin() + to);
  }
  return part;
}

// Ring attention's algebra on one process: the keys cut into two blocks, the partial results
// merged by log-sum-exp (in either order) equal one call over all keys and the reference; each
// block's backward with the final out and lse gives its share, and the shares sum to the whole.
TEST(BlockAttention, MergedKeyBlocksEqualOneCall) {
  BlockCase c{.B = 2,
              .Tq = 90,
              .Tk = 100,
              .H = 4,
              .G = 2,
              .D = 8,
              .pad = 2,
              .q_pos = random_positions(90, 0, 100, 70),
              .k_pos = random_positions(100, 10, 100, 71)};
  const BlockInputs x = random_block_inputs(c, 72);
  const BlockResult<double> ref = block_reference(c, x);
  const BlockResult<float> zeros{{},
                                 {},
                                 std::vector<float>(c.q_size(), 0.0f),
                                 std::vector<float>(c.kv_size(), 0.0f),
                                 std::vector<float>(c.kv_size(), 0.0f)};
  const BlockResult<float> whole = run_block_kernels(c, x, zeros);
  const int64_t split = 37;
  BlockInputs first_x, second_x;
  const BlockCase first = key_slice(c, x, 0, split, &first_x);
  const BlockCase second = key_slice(c, x, split, c.Tk - split, &second_x);

  std::vector<float> out_first(c.out_size()), lse_first(c.B * c.H * c.Tq);
  std::vector<float> out_second(c.out_size()), lse_second(c.B * c.H * c.Tq);
  for (auto [part, part_x, out, lse] : {std::tuple{&first, &first_x, &out_first, &lse_first},
                                        {&second, &second_x, &out_second, &lse_second}}) {
    attention_block_forward(out->data(), lse->data(), part_x->q.data(), part_x->k.data(),
                            part_x->v.data(), c.B, c.Tq, part->Tk, c.H, c.G, c.D, c.q_ld(),
                            c.kv_ld(), c.kv_ld(), c.q_pos.data(), part->k_pos.data());
  }
  ASSERT_GT(std::count(lse_second.begin(), lse_second.end(), -INFINITY), 0);  // rows to skip
  for (bool first_then_second : {true, false}) {
    BlockResult<float> merged;
    merged.out = first_then_second ? out_first : out_second;
    merged.lse = first_then_second ? lse_first : lse_second;
    attention_merge(merged.out.data(), merged.lse.data(),
                    (first_then_second ? out_second : out_first).data(),
                    (first_then_second ? lse_second : lse_first).data(), c.B, c.Tq, c.H, c.D);
    check_block_forward(c, merged, ref);
    EXPECT_LT(max_relative_error(merged.out, {whole.out.begin(), whole.out.end()}), 1e-6);
    EXPECT_LT(lse_error(merged.lse, {whole.lse.begin(), whole.lse.end()}), 1e-6);
  }

  // Backward per block with the whole call's out and lse: dq summed, dk and dv side by side.
  std::vector<float> dq(c.q_size(), 0.0f), dk(c.kv_size(), 0.0f), dv(c.kv_size(), 0.0f);
  int64_t key_row = 0;
  for (auto [part, part_x] : {std::pair{&first, &first_x}, {&second, &second_x}}) {
    std::vector<float> dk_part(part->kv_size(), 0.0f), dv_part(part->kv_size(), 0.0f);
    attention_block_backward(dq.data(), dk_part.data(), dv_part.data(), x.dout.data(),
                             part_x->q.data(), part_x->k.data(), part_x->v.data(), whole.out.data(),
                             whole.lse.data(), c.B, c.Tq, part->Tk, c.H, c.G, c.D, c.q_ld(),
                             c.kv_ld(), c.kv_ld(), c.q_pos.data(), part->k_pos.data());
    for (int64_t b = 0; b < c.B; ++b) {
      const int64_t to = (b * c.Tk + key_row) * c.kv_ld(), from = b * part->Tk * c.kv_ld();
      std::copy_n(dk_part.begin() + from, part->Tk * c.kv_ld(), dk.begin() + to);
      std::copy_n(dv_part.begin() + from, part->Tk * c.kv_ld(), dv.begin() + to);
    }
    key_row += part->Tk;
  }
  EXPECT_LT(max_relative_error(dq, {whole.dq.begin(), whole.dq.end()}), 1e-6);
  EXPECT_LT(max_relative_error(dk, {whole.dk.begin(), whole.dk.end()}), 1e-6);
  EXPECT_LT(max_relative_error(dv, {whole.dv.begin(), whole.dv.end()}), 1e-6);
  EXPECT_LT(max_relative_error(dq, ref.dq), 1e-5);
  EXPECT_LT(max_relative_error(dk, ref.dk), 1e-5);
  EXPECT_LT(max_relative_error(dv, ref.dv), 1e-5);
}

TEST(BlockAttention, MissingPositionsThrow) {
  std::vector<float> buf(64, 0.0f);
  std::vector<int32_t> positions(2, 0);
  float* p = buf.data();
  EXPECT_THROW(
      attention_block_forward(p, p, p, p, p, 1, 2, 2, 2, 2, 4, 8, 8, 8, nullptr, positions.data()),
      Error);
  EXPECT_THROW(attention_block_backward(p, p, p, p, p, p, p, p, p, 1, 2, 2, 2, 2, 4, 8, 8, 8,
                                        positions.data(), nullptr),
               Error);
}

}  // namespace
}  // namespace tessel::cpu
