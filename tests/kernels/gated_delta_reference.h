// Double-precision references of Gated DeltaNet's kernels (Qwen3-Next), written from Hugging
// Face's modeling_qwen3_next.py semantics in their plainest form: the delta rule as its token by
// token recurrence (torch_recurrent_gated_delta_rule), never the chunked form the kernels use.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "support/gradient_check.h"

namespace tessel::testing::gdn_ref {

inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
inline double silu(double x) { return x * sigmoid(x); }
inline double softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }

// Row t > 0 of sequence b begins a document when its key_start differs from the row before.
inline bool starts_document(const std::vector<int32_t>& key_start, int64_t b, int64_t T,
                            int64_t t) {
  return !key_start.empty() && t > 0 && key_start[b * T + t] != key_start[b * T + t - 1];
}

// Qwen3NextRMSNormGated: w · (x · rsqrt(mean(x²) + eps)) · silu(z), rows of C.
inline Vec gated_rmsnorm(const Vec& x, const Vec& z, const Vec& w, int64_t N, int64_t C,
                         double eps) {
  Vec out(N * C);
  for (int64_t n = 0; n < N; ++n) {
    double ss = 0;
    for (int64_t c = 0; c < C; ++c) ss += x[n * C + c] * x[n * C + c];
    const double s = 1.0 / std::sqrt(ss / C + eps);
    for (int64_t c = 0; c < C; ++c)
      out[n * C + c] = w[c] * x[n * C + c] * s * silu(z[n * C + c]);
  }
  return out;
}

// l2norm per head: x · rsqrt(Σ x² + 1e-6); values of a row past heads·D come out 0.
inline Vec l2norm(const Vec& x, int64_t N, int64_t heads, int64_t D, int64_t ld) {
  Vec out(N * ld, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t h = 0; h < heads; ++h) {
      const double* v = x.data() + n * ld + h * D;
      double ss = 0;
      for (int64_t i = 0; i < D; ++i) ss += v[i] * v[i];
      for (int64_t i = 0; i < D; ++i) out[n * ld + h * D + i] = v[i] / std::sqrt(ss + 1e-6);
    }
  }
  return out;
}

// attn (N, H, D) ⊙ sigmoid(gate), gate (n, h, d) at n·gate_ld + h·stride + d (+ offset).
inline Vec output_gate(const Vec& attn, const Vec& gate, int64_t offset, int64_t N, int64_t H,
                       int64_t D, int64_t gate_ld, int64_t stride) {
  Vec out(N * H * D);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < D; ++d)
        out[(n * H + h) * D + d] =
            attn[(n * H + h) * D + d] * sigmoid(gate[offset + n * gate_ld + h * stride + d]);
  return out;
}

// silu(causal depthwise conv1d), zero history before each sequence's and document's start:
// x rows (b·T + t)·ld, weight (C, K), out (B, T, C).
inline Vec conv1d_silu(const Vec& x, const Vec& weight, const std::vector<int32_t>& key_start,
                       int64_t B, int64_t T, int64_t C, int64_t K, int64_t ld) {
  Vec out(B * T * C);
  for (int64_t b = 0; b < B; ++b) {
    int64_t first = 0;
    for (int64_t t = 0; t < T; ++t) {
      if (starts_document(key_start, b, T, t)) first = t;
      for (int64_t c = 0; c < C; ++c) {
        double pre = 0;
        for (int64_t j = 0; j < K; ++j) {
          const int64_t s = t - K + 1 + j;
          if (s >= first) pre += weight[c * K + j] * x[(b * T + s) * ld + c];
        }
        out[(b * T + t) * C + c] = silu(pre);
      }
    }
  }
  return out;
}

// [beta | g] (2, N, H): sigmoid(b) and −exp(A_log) · softplus(a + dt_bias).
inline Vec gates(const Vec& b, const Vec& a, const Vec& A_log, const Vec& dt_bias, int64_t N,
                 int64_t H) {
  Vec out(2 * N * H);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t h = 0; h < H; ++h) {
      out[n * H + h] = sigmoid(b[n * H + h]);
      out[N * H + n * H + h] = -std::exp(A_log[h]) * softplus(a[n * H + h] + dt_bias[h]);
    }
  }
  return out;
}

// The gated delta rule by its recurrence, per (b, value head j), key head j / (Hv/Hk):
//   S ← e^{g} S (0 at a document start); u = β (v − Sᵀk); S ← S + k uᵀ; o = Sᵀ q / sqrt(Dk).
// q, k rows (b·T + t)·ld + h·Dk + q_at / k_at; v rows (b·T + t)·ld + j·Dv + v_at (one buffer,
// as the conv leaves [q | k | v]); beta, g (B, T, Hv); initial (B, Hv, Dk, Dv) or empty.
// Returns [out (B, T, Hv, Dv) | final state (B, Hv, Dk, Dv)].
struct DeltaShape {
  int64_t B, T, Hk, Hv, Dk, Dv, ld, q_at, k_at, v_at;
};
inline Vec delta_rule(const DeltaShape& d, const Vec& qkv, const Vec& beta, const Vec& g,
                      const Vec& initial, const std::vector<int32_t>& key_start) {
  const int64_t r = d.Hv / d.Hk;
  Vec out(d.B * d.T * d.Hv * d.Dv + d.B * d.Hv * d.Dk * d.Dv);
  double* final_state = out.data() + d.B * d.T * d.Hv * d.Dv;
  Vec S(d.Dk * d.Dv), kS(d.Dv);
  for (int64_t b = 0; b < d.B; ++b) {
    for (int64_t j = 0; j < d.Hv; ++j) {
      const int64_t h = j / r;
      for (int64_t i = 0; i < d.Dk * d.Dv; ++i)
        S[i] = initial.empty() ? 0.0 : initial[(b * d.Hv + j) * d.Dk * d.Dv + i];
      for (int64_t t = 0; t < d.T; ++t) {
        const double* row = qkv.data() + (b * d.T + t) * d.ld;
        const double* q = row + d.q_at + h * d.Dk;
        const double* k = row + d.k_at + h * d.Dk;
        const double* v = row + d.v_at + j * d.Dv;
        const int64_t at = (b * d.T + t) * d.Hv + j;
        const double alpha = starts_document(key_start, b, d.T, t) ? 0.0 : std::exp(g[at]);
        for (double& s : S) s *= alpha;
        for (int64_t e = 0; e < d.Dv; ++e) {
          kS[e] = 0;
          for (int64_t i = 0; i < d.Dk; ++i) kS[e] += k[i] * S[i * d.Dv + e];
        }
        for (int64_t i = 0; i < d.Dk; ++i)
          for (int64_t e = 0; e < d.Dv; ++e) S[i * d.Dv + e] += k[i] * beta[at] * (v[e] - kS[e]);
        for (int64_t e = 0; e < d.Dv; ++e) {
          double o = 0;
          for (int64_t i = 0; i < d.Dk; ++i) o += S[i * d.Dv + e] * q[i];
          out[at * d.Dv + e] = o / std::sqrt(static_cast<double>(d.Dk));
        }
      }
      for (int64_t i = 0; i < d.Dk * d.Dv; ++i) final_state[(b * d.Hv + j) * d.Dk * d.Dv + i] = S[i];
    }
  }
  return out;
}

// The same rule in its chunked form (§3.1 of docs/QWEN3_NEXT.md), in double and plain loops: chunks
// of C rows padded with β = 0, g = 0; within a chunk D[r, s] = e^{c_r − c_s} (s ≤ r, one
// document), A = strict_lower(diag(β)(K Kᵀ ⊙ D)), U = (I + A)⁻¹ (β ⊙ V − (β e^{c} ⊙ K) S),
// O = (e^{c} ⊙ Q) S + (Q Kᵀ ⊙ D) U, S ← e^{c_L} S + (e^{c_L − c} ⊙ K)ᵀ U, where a document
// that begins inside the chunk cuts the start state off the rows from it on. Equal to
// delta_rule up to rounding: the algebra the kernels implement, checked on its own.
inline Vec chunked_delta_rule(const DeltaShape& d, const Vec& qkv, const Vec& beta, const Vec& g,
                              const Vec& initial, const std::vector<int32_t>& key_start,
                              int64_t C) {
  const int64_t r_heads = d.Hv / d.Hk, Dk = d.Dk, Dv = d.Dv;
  Vec out(d.B * d.T * d.Hv * Dv + d.B * d.Hv * Dk * Dv);
  double* final_state = out.data() + d.B * d.T * d.Hv * Dv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(Dk));
  for (int64_t b = 0; b < d.B; ++b) {
    for (int64_t j = 0; j < d.Hv; ++j) {
      const int64_t h = j / r_heads;
      Vec S(Dk * Dv);
      for (int64_t i = 0; i < Dk * Dv; ++i)
        S[i] = initial.empty() ? 0.0 : initial[(b * d.Hv + j) * Dk * Dv + i];
      for (int64_t t0 = 0; t0 < d.T; t0 += C) {
        Vec Q(C * Dk), K(C * Dk), V(C * Dv), bt(C), c(C);
        std::vector<int64_t> first(C);
        double cum = 0;
        int64_t doc = -1;
        for (int64_t r = 0; r < C; ++r) {
          const int64_t t = t0 + r;
          const bool real = t < d.T;
          if (real && starts_document(key_start, b, d.T, t)) doc = r;
          first[r] = doc;
          const double* row = qkv.data() + (b * d.T + (real ? t : 0)) * d.ld;
          for (int64_t i = 0; i < Dk; ++i) {
            Q[r * Dk + i] = real ? row[d.q_at + h * Dk + i] * scale : 0.0;
            K[r * Dk + i] = real ? row[d.k_at + h * Dk + i] : 0.0;
          }
          for (int64_t e = 0; e < Dv; ++e) V[r * Dv + e] = real ? row[d.v_at + j * Dv + e] : 0.0;
          bt[r] = real ? beta[(b * d.T + t) * d.Hv + j] : 0.0;
          cum += real ? g[(b * d.T + t) * d.Hv + j] : 0.0;
          c[r] = cum;
        }
        const auto Dm = [&](int64_t r, int64_t s) {
          return s <= r && first[s] == first[r] ? std::exp(c[r] - c[s]) : 0.0;
        };
        const auto ec = [&](int64_t r) { return first[r] < 0 ? std::exp(c[r]) : 0.0; };
        const auto dot_k = [&](const Vec& X, int64_t r, int64_t s) {
          double sum = 0;
          for (int64_t i = 0; i < Dk; ++i) sum += X[r * Dk + i] * K[s * Dk + i];
          return sum;
        };
        // U row by row: (I + A) U = β ⊙ V − (β e^{c} ⊙ K) S, forward substitution.
        Vec U(C * Dv);
        for (int64_t r = 0; r < C; ++r) {
          for (int64_t e = 0; e < Dv; ++e) {
            double x = V[r * Dv + e];
            for (int64_t i = 0; i < Dk; ++i) x -= ec(r) * K[r * Dk + i] * S[i * Dv + e];
            x *= bt[r];
            for (int64_t s = 0; s < r; ++s) x -= bt[r] * dot_k(K, r, s) * Dm(r, s) * U[s * Dv + e];
            U[r * Dv + e] = x;
          }
        }
        for (int64_t r = 0; r < C && t0 + r < d.T; ++r) {
          for (int64_t e = 0; e < Dv; ++e) {
            double o = 0;
            for (int64_t i = 0; i < Dk; ++i) o += ec(r) * Q[r * Dk + i] * S[i * Dv + e];
            for (int64_t s = 0; s <= r; ++s) o += dot_k(Q, r, s) * Dm(r, s) * U[s * Dv + e];
            out[((b * d.T + t0 + r) * d.Hv + j) * Dv + e] = o;
          }
        }
        const int64_t L = C - 1;
        const double gamma = first[L] < 0 ? std::exp(c[L]) : 0.0;
        for (int64_t i = 0; i < Dk; ++i) {
          for (int64_t e = 0; e < Dv; ++e) {
            double x = gamma * S[i * Dv + e];
            for (int64_t s = 0; s < C; ++s)
              if (first[s] == first[L]) x += std::exp(c[L] - c[s]) * K[s * Dk + i] * U[s * Dv + e];
            S[i * Dv + e] = x;
          }
        }
      }
      for (int64_t i = 0; i < Dk * Dv; ++i) final_state[(b * d.Hv + j) * Dk * Dv + i] = S[i];
    }
  }
  return out;
}

}  // namespace tessel::testing::gdn_ref
