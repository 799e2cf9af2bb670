// Naive double-precision forwards of the kernels, written from the formulas (and the PyTorch /
// Hugging Face / Megatron-LM definitions) rather than from the kernels. Test-only: the float
// kernels (tests/kernels/) and layers (tests/model/) are compared with these, and finite
// differences of these check their backward.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

namespace tessel::ref {

using Vec = std::vector<double>;

// out (N, C) = wte[tokens[n]] + wpe[positions[n]] (wpe empty: no position term).
inline Vec embedding(const Vec& wte, const Vec& wpe, const std::vector<int32_t>& tokens,
                     const std::vector<int32_t>& positions, int64_t C) {
  const int64_t N = static_cast<int64_t>(tokens.size());
  Vec out(N * C);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < C; ++c) {
      out[n * C + c] = wte[tokens[n] * C + c] + (wpe.empty() ? 0.0 : wpe[positions[n] * C + c]);
    }
  }
  return out;
}

struct NormResult {
  Vec out;   // (N, C)
  Vec mean;  // (N), LayerNorm only
  Vec rstd;  // (N)
};

// torch.nn.LayerNorm: biased variance.
inline NormResult layernorm(const Vec& inp, const Vec& weight, const Vec& bias, int64_t N,
                            int64_t C, double eps) {
  NormResult r{Vec(N * C), Vec(N), Vec(N)};
  for (int64_t n = 0; n < N; ++n) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < C; ++c) mean += inp[n * C + c] / C;
    for (int64_t c = 0; c < C; ++c) var += (inp[n * C + c] - mean) * (inp[n * C + c] - mean) / C;
    const double rstd = 1.0 / std::sqrt(var + eps);
    for (int64_t c = 0; c < C; ++c) {
      r.out[n * C + c] = (inp[n * C + c] - mean) * rstd * weight[c] + bias[c];
    }
    r.mean[n] = mean;
    r.rstd[n] = rstd;
  }
  return r;
}

// Hugging Face LlamaRMSNorm.
inline NormResult rmsnorm(const Vec& inp, const Vec& weight, int64_t N, int64_t C, double eps) {
  NormResult r{Vec(N * C), Vec(), Vec(N)};
  for (int64_t n = 0; n < N; ++n) {
    double mean_sq = 0;
    for (int64_t c = 0; c < C; ++c) mean_sq += inp[n * C + c] * inp[n * C + c] / C;
    const double rstd = 1.0 / std::sqrt(mean_sq + eps);
    for (int64_t c = 0; c < C; ++c) r.out[n * C + c] = weight[c] * inp[n * C + c] * rstd;
    r.rstd[n] = rstd;
  }
  return r;
}

// Exact GELU, x · Φ(x) (torch's F.gelu, Megatron's default; Hugging Face "gelu").
inline Vec gelu_erf(const Vec& x) {
  Vec out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = 0.5 * x[i] * (1.0 + std::erf(x[i] / std::sqrt(2.0)));
  return out;
}

// Hugging Face "gelu_new" (tanh approximation).
inline Vec gelu(const Vec& x) {
  const double pi = 3.14159265358979323846;
  Vec out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    out[i] =
        0.5 * x[i] * (1.0 + std::tanh(std::sqrt(2.0 / pi) * (x[i] + 0.044715 * std::pow(x[i], 3))));
  }
  return out;
}

inline Vec swiglu(const Vec& gate, const Vec& up) {
  Vec out(gate.size());
  for (size_t i = 0; i < gate.size(); ++i) out[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
  return out;
}

// alpha · op(A) · op(B) + beta · C0 (cpu/gemm.h's contract), the (M, N) result packed (stride N);
// A, B and C0 row-major with strides lda, ldb, ldc.
template <typename T>
Vec gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
         const std::vector<T>& a, int64_t lda, const std::vector<T>& b, int64_t ldb, double beta,
         const std::vector<T>& c0, int64_t ldc) {
  Vec out;
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < K; ++p)
        sum += double{trans_a ? a[p * lda + i] : a[i * lda + p]} *
               double{trans_b ? b[j * ldb + p] : b[p * ldb + j]};
      out.push_back(alpha * sum + beta * double{c0[i * ldc + j]});
    }
  }
  return out;
}

// out (N, OC) = inp (N, IC) · W + bias; W is [IC, OC] when in_out, else [OC, IC].
inline Vec linear(const Vec& inp, const Vec& weight, const Vec& bias, int64_t N, int64_t IC,
                  int64_t OC, bool in_out) {
  Vec out(N * OC);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t o = 0; o < OC; ++o) {
      double sum = bias.empty() ? 0.0 : bias[o];
      for (int64_t i = 0; i < IC; ++i) {
        sum += inp[n * IC + i] * (in_out ? weight[i * OC + o] : weight[o * IC + i]);
      }
      out[n * OC + o] = sum;
    }
  }
  return out;
}

// The RoPE angle as Hugging Face computes it: inv_freq and the product in float.
inline double rope_angle(int64_t pos, int64_t i, int64_t head_dim, float base) {
  const float inv_freq =
      1.0f / std::pow(base, static_cast<float>(2 * i) / static_cast<float>(head_dim));
  return static_cast<double>(static_cast<float>(pos) * inv_freq);
}

// Rotate-half RoPE on x (N rows of ld values; heads vectors of head_dim each at the row's start;
// the rest of a row is passed through).
inline Vec rope(const Vec& x, const std::vector<int32_t>& positions, int64_t heads,
                int64_t head_dim, int64_t ld, float base) {
  Vec out = x;
  const int64_t half = head_dim / 2;
  for (size_t n = 0; n < positions.size(); ++n) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t at = n * ld + h * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const double angle = rope_angle(positions[n], i, head_dim, base);
        const double a = x[at + i], b = x[at + i + half];
        out[at + i] = a * std::cos(angle) - b * std::sin(angle);
        out[at + i + half] = b * std::cos(angle) + a * std::sin(angle);
      }
    }
  }
  return out;
}

struct CrossEntropyResult {
  Vec losses;  // (N)
  Vec lse;     // (N)
};

inline CrossEntropyResult cross_entropy(const Vec& logits, const std::vector<int32_t>& targets,
                                        int64_t V) {
  const int64_t N = static_cast<int64_t>(targets.size());
  CrossEntropyResult r{Vec(N), Vec(N)};
  for (int64_t n = 0; n < N; ++n) {
    double max = logits[n * V];
    for (int64_t v = 0; v < V; ++v) max = std::max(max, logits[n * V + v]);
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(logits[n * V + v] - max);
    r.lse[n] = max + std::log(sum);
    r.losses[n] = r.lse[n] - logits[n * V + targets[n]];
  }
  return r;
}

// ---- Mixture-of-Experts router, from Megatron-LM's definitions (TopKRouter,
// switch_load_balancing_loss_func, z_loss_func, the "probs" drop policy). It sorts where the
// kernels insert and ranks by counting where they sort, so the two share no code.

struct Router {
  int64_t E = 0, k = 0;
  bool sigmoid = false, pre_softmax = false;
};

inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

inline Vec softmax(const Vec& x) {
  const double m = *std::max_element(x.begin(), x.end());
  Vec out(x.size());
  double sum = 0;
  for (size_t i = 0; i < x.size(); ++i) sum += out[i] = std::exp(x[i] - m);
  for (double& v : out) v /= sum;
  return out;
}

// One token's experts and routing weights: sort the experts by score (ties: lower index).
inline void topk_row(const Router& r, const double* logits, int32_t* experts, double* probs) {
  const Vec l(logits, logits + r.E);
  Vec scores = l;
  if (r.sigmoid) {
    for (double& s : scores) s = sigmoid(s);
  } else if (r.pre_softmax) {
    scores = softmax(l);
  }
  std::vector<int32_t> order(r.E);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return scores[a] > scores[b]; });
  Vec chosen(r.k);
  for (int64_t j = 0; j < r.k; ++j) {
    experts[j] = order[j];
    chosen[j] = scores[order[j]];
  }
  if (!r.sigmoid && !r.pre_softmax) chosen = softmax(chosen);
  if (r.sigmoid && r.k > 1) {
    double total = 0;
    for (double c : chosen) total += c;
    for (double& c : chosen) c /= total + 1e-20;
  }
  std::copy(chosen.begin(), chosen.end(), probs);
}

struct Routing {
  std::vector<int32_t> experts;  // (N, k)
  Vec probs;                     // (N, k)
};

inline Routing topk(const Router& r, const Vec& logits, int64_t N) {
  Routing out{std::vector<int32_t>(N * r.k), Vec(N * r.k)};
  for (int64_t n = 0; n < N; ++n)
    topk_row(r, logits.data() + n * r.E, out.experts.data() + n * r.k,
                 out.probs.data() + n * r.k);
  return out;
}

// Megatron's scores for the load-balancing loss.
inline Vec aux_scores(const Vec& logits, int64_t N, int64_t E, bool sig) {
  Vec s(N * E);
  for (int64_t n = 0; n < N; ++n) {
    Vec row(logits.begin() + n * E, logits.begin() + (n + 1) * E);
    if (sig) {
      double total = 0;
      for (double& v : row) total += v = sigmoid(v);
      for (double& v : row) v /= total + 1e-20;
    } else {
      row = softmax(row);
    }
    std::copy(row.begin(), row.end(), s.begin() + n * E);
  }
  return s;
}

// switch_load_balancing_loss_func: coeff · E / (k · T²) · Σ_e counts_e · Σ_n scores_ne.
inline double aux_loss(const Vec& scores, const Vec& counts, int64_t N, int64_t E, int64_t k,
                       int64_t T, double coeff) {
  double sum = 0;
  for (int64_t e = 0; e < E; ++e) {
    double p = 0;
    for (int64_t n = 0; n < N; ++n) p += scores[n * E + e];
    sum += p * counts[e];
  }
  return coeff * E / (static_cast<double>(k) * T * T) * sum;
}

inline double z_loss(const Vec& logits, int64_t N, int64_t E, double coeff) {
  double sum = 0;
  for (int64_t n = 0; n < N; ++n) {
    double m = logits[n * E];
    for (int64_t e = 0; e < E; ++e) m = std::max(m, logits[n * E + e]);
    double s = 0;
    for (int64_t e = 0; e < E; ++e) s += std::exp(logits[n * E + e] - m);
    const double lse = m + std::log(s);
    sum += lse * lse;
  }
  return coeff * sum / N;
}

// Brute force of the drop policy: assignment a survives iff fewer than `capacity` assignments to
// its expert beat it (a higher prob, or the same prob and an earlier token).
inline std::vector<int32_t> capacity_keep(const std::vector<int32_t>& experts,
                                          const std::vector<float>& probs, int64_t capacity) {
  const size_t A = experts.size();
  std::vector<int32_t> keep(A);
  for (size_t a = 0; a < A; ++a) {
    int64_t better = 0;
    for (size_t b = 0; b < A; ++b) {
      if (b == a || experts[b] != experts[a]) continue;
      if (probs[b] > probs[a] || (probs[b] == probs[a] && b < a)) ++better;
    }
    keep[a] = better < capacity ? 1 : 0;
  }
  return keep;
}

// ---- optimizer -----------------------------------------------------------------------------

// AdamW in double, written straight from the torch.optim.AdamW documentation.
struct AdamW {
  std::vector<double> p, m, v;
  explicit AdamW(const std::vector<float>& init)
      : p(init.begin(), init.end()), m(init.size(), 0.0), v(init.size(), 0.0) {}
  void step(const std::vector<float>& g, double lr, double b1, double b2, double eps, double wd,
            int t) {
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] -= lr * wd * p[i];
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      const double m_hat = m[i] / (1 - std::pow(b1, t));
      const double v_hat = v[i] / (1 - std::pow(b2, t));
      p[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
    }
  }
};

}  // namespace tessel::ref
