// Naive double-precision forwards of the CPU kernels, written from the formulas (and the
// PyTorch / Hugging Face definitions) rather than from the kernels. Test-only: the float kernels
// are compared with these, and finite differences of these check the kernels' backward.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
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

}  // namespace tessel::ref
