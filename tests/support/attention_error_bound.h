// How far an fp32 causal attention may be from the exact one, element by element, whatever the
// order of its sums: the tolerance of tests that compare two fp32 computations of one attention
// (one process against the CP ring, which regroups every sum over keys into chunks merged by
// their log-sum-exp). A fixed relative tolerance there is met or missed by the machine: oneDNN's
// AVX2 and AVX-512 kernels sum in different orders, and 1e-6 held on one and not the other.
//
// The bound is first-order forward error analysis (Higham, "Accuracy and Stability of Numerical
// Algorithms", §3.1): a sum of n terms computed in any order is within γ(n) of the exact sum
// times Σ|terms|, u = 2^-24; a product or a rounding adds u. The worst case, n·u/(1 − n·u), is
// met only when every rounding errs the same way; Higham and Mary ("A New Approach to
// Probabilistic Rounding Error Analysis", SIAM J. Sci. Comput. 41, 2019) show that with the
// roundings independent and of mean zero λ·√n·u holds with probability at least
// 1 − 2n·exp(−λ²/2): λ = 8 makes that 1 − 2.5e-14·n. γ(n) is the smaller of the two. Each
// quantity carries the error it was computed with into the next, as the kernels compute it:
//   s = scale · q·k               γ(D+1) · scale Σ|q||k|
//   lse = m + log Σ exp(s − m)    the worst argument's error, exp's, γ(keys + merges) of the sum
//   P = exp(s − lse)              P · (e_s + e_lse + u|s − lse| + exp's error)
//   out = Σ P v                   Σ e_P |v| + γ(keys + merges) Σ P|v|
//   dP = dout·v, D_t = dout·out   γ(D) Σ|..||..| (+ out's own error in D_t)
//   dS = P (dP − D_t)             e_P |dP − D_t| + P (e_dP + e_D + u|dP − D_t|) + u|dS|
//   dq = scale Σ dS k, dk = scale Σ dS q, dv = Σ P dout, each over its whole reduction.
// "merges" counts the rescalings that blockwise (online) softmax and the CP merge add to a sum
// over keys: three roundings (a scale, a multiply, an add) per block of keys. Two computations
// that each meet the bound differ by at most twice it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace tessel::testing {

struct AttentionErrorBound {
  std::vector<double> out, lse, dq, dk, dv;  // the layouts of the attention's own tensors
};

// q, dout (B, T, H·D), k, v (B, T, G·D), lse (B, H, T); causal. key_chunks: the most pieces a
// row's keys are cut into by the computation under test besides the kernels' own blocks of 16 or
// more keys (the CP ring's 2·CP chunks).
inline AttentionErrorBound attention_error_bound(const std::vector<float>& q, const std::vector<float>& k,
                                                 const std::vector<float>& v,
                                                 const std::vector<float>& dout, int64_t B,
                                                 int64_t T, int64_t H, int64_t G, int64_t D,
                                                 int64_t key_chunks) {
  constexpr double u = 0x1p-24;
  constexpr double exp_error = 4 * u;  // cpu/vec_math.h's exp_approx: ~1e-7 relative, 2u
  constexpr double lambda = 8;
  const auto gamma = [](double n) { return std::min(n, lambda * std::sqrt(n)) * u / (1 - n * u); };
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const int64_t group = H / G;
  AttentionErrorBound bound{std::vector<double>(q.size()), std::vector<double>(B * H * T),
                            std::vector<double>(q.size()), std::vector<double>(k.size()),
                            std::vector<double>(v.size())};
  std::vector<double> sums_dk(k.size()), sums_dv(v.size());  // Σ|terms| of dk and dv
  std::vector<double> s(T), e_s(T), P(T), e_P(T), out(D), e_out(D);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        const int64_t keys = i + 1, g = h / group;
        const double merges = 3.0 * (key_chunks + (keys + 15) / 16);
        const float* q_i = &q[(b * T + i) * H * D + h * D];
        const float* dout_i = &dout[(b * T + i) * H * D + h * D];
        const auto k_j = [&](int64_t j) { return &k[(b * T + j) * G * D + g * D]; };
        const auto v_j = [&](int64_t j) { return &v[(b * T + j) * G * D + g * D]; };
        // forward: scores, log-sum-exp, probabilities, output
        double m = -INFINITY, e_m = 0;
        for (int64_t j = 0; j < keys; ++j) {
          double dot = 0, magnitude = 0;
          for (int64_t d = 0; d < D; ++d) {
            dot += static_cast<double>(q_i[d]) * k_j(j)[d];
            magnitude += std::abs(static_cast<double>(q_i[d]) * k_j(j)[d]);
          }
          s[j] = scale * dot;
          e_s[j] = gamma(D + 1) * scale * magnitude;
          if (s[j] > m) m = s[j], e_m = e_s[j];
        }
        double l = 0, worst_argument = 0;
        for (int64_t j = 0; j < keys; ++j) {
          l += std::exp(s[j] - m);
          worst_argument = std::max(worst_argument, e_s[j] + e_m + u * std::abs(s[j] - m));
        }
        const double lse = m + std::log(l);
        const double e_lse = e_m + worst_argument + exp_error + gamma(keys + merges) + u * std::abs(lse);
        bound.lse[(b * H + h) * T + i] = e_lse;
        std::fill(out.begin(), out.end(), 0.0);
        std::fill(e_out.begin(), e_out.end(), 0.0);
        std::vector<double> weighted(D, 0.0);  // Σ P|v|
        for (int64_t j = 0; j < keys; ++j) {
          P[j] = std::exp(s[j] - lse);
          e_P[j] = P[j] * (e_s[j] + e_lse + u * std::abs(s[j] - lse) + exp_error);
          for (int64_t d = 0; d < D; ++d) {
            out[d] += P[j] * v_j(j)[d];
            e_out[d] += e_P[j] * std::abs(v_j(j)[d]);
            weighted[d] += P[j] * std::abs(v_j(j)[d]);
          }
        }
        double row_d = 0, e_row_d = 0;  // D_t = Σ dout·out
        for (int64_t d = 0; d < D; ++d) {
          e_out[d] += gamma(keys + merges) * weighted[d];
          bound.out[(b * T + i) * H * D + h * D + d] = e_out[d];
          row_d += dout_i[d] * out[d];
          e_row_d += gamma(D) * std::abs(dout_i[d] * out[d]) + std::abs(dout_i[d]) * e_out[d];
        }
        // backward: this row's dS and its shares of dq, dk, dv
        std::vector<double> sum_dq(D, 0.0);
        double* e_dq = &bound.dq[(b * T + i) * H * D + h * D];
        for (int64_t j = 0; j < keys; ++j) {
          double dP = 0, e_dP = 0;
          for (int64_t d = 0; d < D; ++d) {
            dP += static_cast<double>(dout_i[d]) * v_j(j)[d];
            e_dP += gamma(D) * std::abs(static_cast<double>(dout_i[d]) * v_j(j)[d]);
          }
          const double diff = dP - row_d, dS = P[j] * diff;
          const double e_dS = e_P[j] * std::abs(diff) + P[j] * (e_dP + e_row_d + u * std::abs(diff)) +
                              u * std::abs(dS);
          const int64_t kv = (b * T + j) * G * D + g * D;
          for (int64_t d = 0; d < D; ++d) {
            e_dq[d] += scale * e_dS * std::abs(k_j(j)[d]);
            sum_dq[d] += scale * std::abs(dS * k_j(j)[d]);
            bound.dk[kv + d] += scale * e_dS * std::abs(q_i[d]);
            sums_dk[kv + d] += scale * std::abs(dS * q_i[d]);
            bound.dv[kv + d] += e_P[j] * std::abs(dout_i[d]);
            sums_dv[kv + d] += P[j] * std::abs(dout_i[d]);
          }
        }
        for (int64_t d = 0; d < D; ++d) e_dq[d] += gamma(keys + 1 + merges) * sum_dq[d];
      }
  // dk and dv of key j sum over every query row i ≥ j of every query head of its group
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < T; ++j) {
      const double terms = static_cast<double>(group * (T - j)) + 3.0 * (key_chunks + (T + 15) / 16);
      for (int64_t c = 0; c < G * D; ++c) {
        const int64_t at = (b * T + j) * G * D + c;
        bound.dk[at] += gamma(terms + 1) * sums_dk[at];
        bound.dv[at] += gamma(terms) * sums_dv[at];
      }
    }
  return bound;
}

// The worst |got − want| / allowed over the elements: at most 1 when every element is within
// (an element allowed nothing must be equal).
inline double worst_excess(const std::vector<float>& got, const std::vector<float>& want,
                           const std::vector<double>& allowed) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double difference = std::abs(static_cast<double>(got[i]) - want[i]);
    if (difference > 0) worst = std::max(worst, difference / allowed[i]);
  }
  return worst;
}

}  // namespace tessel::testing
