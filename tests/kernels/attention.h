// What the attention kernel cases (attention_test.cpp, attention_block_test.cpp) share: the
// layouts of q, k and v, the double-precision references — a naive attention with an explicit
// softmax over the keys each query sees, causal or full, or by global positions for context
// parallelism's key blocks, and its backward, itself checked against central finite differences
// there — and one forward + backward run of the kernels.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/harness.h"

namespace tessel::testing {

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

// scale · N(0, 1), the attention cases' own seed.
inline std::vector<float> random_vector(int64_t n, uint64_t stream, float scale) {
  return random_floats(n, stream, scale, 0.0f, 42);
}

// ---- the double-precision reference ------------------------------------------------------------

// Probabilities of query (b, t, h) over keys 0..visible-1, and the row's log-sum-exp.
inline std::vector<double> reference_probs(const AttentionCase& c,
                                           const std::vector<double>& qkv, int64_t b, int64_t t,
                                           int64_t h, double* lse) {
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
inline void reference_forward(const AttentionCase& c, const std::vector<double>& qkv,
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
inline double reference_objective(const AttentionCase& c, const std::vector<double>& qkv,
                                  const std::vector<double>& w) {
  std::vector<double> out, lse;
  reference_forward(c, qkv, out, lse);
  double sum = 0;
  for (size_t i = 0; i < out.size(); ++i) sum += out[i] * w[i];
  return sum;
}

// Gradient of Σ out·dout with respect to the q, k and v entries of the buffer (padding stays 0):
// explicit softmax backward, dS = P ∘ (dP - Σ_s P·dP).
inline std::vector<double> reference_backward(const AttentionCase& c,
                                              const std::vector<double>& qkv,
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

// ---- the kernels on one case -------------------------------------------------------------------

struct KernelRun {
  std::vector<float> out, lse, grad;  // grad: the qkv buffer's layout, starting from grad_init
};

// attention_forward then attention_backward on one case, the gradient starting from grad_init.
inline KernelRun run_kernels(const Kernels& k, const AttentionCase& c,
                             const std::vector<float>& qkv, const std::vector<float>& dout,
                             const std::vector<float>& grad_init) {
  const FloatBuffer d_qkv(k, qkv), d_dout(k, dout);
  FloatBuffer out(k, c.B * c.T * c.H * c.D), lse(k, c.B * c.H * c.T), grad(k, grad_init);
  const float* base = d_qkv.data();
  k.attention_forward(out.data(), lse.data(), base + c.q_off(), base + c.k_off(),
                      base + c.v_off(), c.B, c.T, c.H, c.G, c.D, c.q_ld(), c.k_ld(), c.v_ld(),
                      c.causal, tessel::DropoutSite{});
  float* g = grad.data();
  k.attention_backward(g + c.q_off(), g + c.k_off(), g + c.v_off(), d_dout.data(),
                       base + c.q_off(), base + c.k_off(), base + c.v_off(), out.data(),
                       lse.data(), c.B, c.T, c.H, c.G, c.D, c.q_ld(), c.k_ld(), c.v_ld(),
                       c.causal, tessel::DropoutSite{});
  return {out.host(), lse.host(), grad.host()};
}

// ---- block attention: keys visible by position -------------------------------------------------

// q (B, Tq, H·D + pad), k and v (B, Tk, G·D + pad) in separate buffers; key s is visible to query
// t iff k_pos[s] ≤ q_pos[t], and with packed documents (key_start, (B, Tq), empty: none) iff also
// k_pos[s] ≥ key_start[b·Tq + t].
struct BlockCase {
  int64_t B, Tq, Tk, H, G, D, pad;
  std::vector<int32_t> q_pos, k_pos;
  std::vector<int32_t> key_start = {};

  int64_t q_ld() const { return H * D + pad; }
  int64_t kv_ld() const { return G * D + pad; }
  int64_t q_size() const { return B * Tq * q_ld(); }
  int64_t kv_size() const { return B * Tk * kv_ld(); }
  int64_t out_size() const { return B * Tq * H * D; }
};

struct BlockInputs {
  std::vector<float> q, k, v, dout;
};

inline BlockInputs random_block_inputs(const BlockCase& c, uint64_t stream) {
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
inline BlockResult<double> block_reference(const BlockCase& c, const BlockInputs& x) {
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
          if (!c.key_start.empty() && c.k_pos[s] < c.key_start[b * c.Tq + t]) continue;
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

}  // namespace tessel::testing
