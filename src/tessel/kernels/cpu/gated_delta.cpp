// Gated DeltaNet's small kernels (Qwen3-Next linear attention): the causal depthwise conv1d +
// SiLU over [q | k | v], the gates β and g, and the delta rule's one-token step for decoding.
#include <algorithm>
#include <cmath>

#include "tessel/kernels/cpu/kernels.h"
#include "tessel/kernels/cpu/vec_math.h"
#include "tessel/kernels/packed_documents.h"

namespace tessel::cpu {

namespace {

// The first row of row t's document: t itself after a boundary, else the previous row's first.
// Rows are visited in order, so the caller carries `first` along.
inline int64_t document_first(const int32_t* key_start, int64_t b, int64_t T, int64_t t,
                              int64_t first) {
  return starts_document(key_start, b, T, t) ? t : first;
}

// Channels per block of the conv: each thread owns whole channels, so dweight needs no partial
// sums, and a block of rows is read contiguously.
constexpr int64_t kConvChannelBlock = 64;

// The conv's pre-activation at row t of sequence b for channels [c0, c1): Σ_j w[c, j] · x[t−K+1+j]
// over the taps inside the document [first, t].
inline void conv_pre(float* pre, const float* inp, const float* weight, int64_t b, int64_t T,
                     int64_t t, int64_t first, int64_t c0, int64_t c1, int64_t K, int64_t ld) {
  for (int64_t c = c0; c < c1; ++c) pre[c - c0] = 0.0f;
  for (int64_t j = std::max<int64_t>(0, K - 1 - (t - first)); j < K; ++j) {
    const float* x = inp + (b * T + t - K + 1 + j) * ld;  // (C)
    for (int64_t c = c0; c < c1; ++c) pre[c - c0] += weight[c * K + j] * x[c];
  }
}

}  // namespace

void causal_conv1d_silu_forward(float* out, const float* inp, const float* weight,
                                const int32_t* key_start, int64_t B, int64_t T, int64_t C,
                                int64_t K, int64_t ld) {
  const int64_t blocks = (C + kConvChannelBlock - 1) / kConvChannelBlock;
#pragma omp parallel for collapse(2) schedule(static) if (worth_parallel(B * T * C * K))
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t c0 = blk * kConvChannelBlock, c1 = std::min(C, c0 + kConvChannelBlock);
      float pre[kConvChannelBlock];
      int64_t first = 0;
      for (int64_t t = 0; t < T; ++t) {
        first = document_first(key_start, b, T, t, first);
        conv_pre(pre, inp, weight, b, T, t, first, c0, c1, K, ld);
        float* o = out + (b * T + t) * C;  // (C)
        for (int64_t c = c0; c < c1; ++c) o[c] = pre[c - c0] * sigmoid(pre[c - c0]);
      }
    }
  }
}

void causal_conv1d_silu_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                                 const float* weight, const int32_t* key_start, int64_t B,
                                 int64_t T, int64_t C, int64_t K, int64_t ld) {
  const int64_t blocks = (C + kConvChannelBlock - 1) / kConvChannelBlock;
  // Channel blocks own their dweight rows, so they run in parallel; batch items add into them in
  // order (the same bits for any thread count).
#pragma omp parallel for schedule(static) if (worth_parallel(B * T * C * K))
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kConvChannelBlock, c1 = std::min(C, c0 + kConvChannelBlock);
    float pre[kConvChannelBlock];
    for (int64_t b = 0; b < B; ++b) {
      int64_t first = 0;
      for (int64_t t = 0; t < T; ++t) {
        first = document_first(key_start, b, T, t, first);
        conv_pre(pre, inp, weight, b, T, t, first, c0, c1, K, ld);
        const float* g = dout + (b * T + t) * C;  // (C)
        // dpre = dout · silu'(pre), silu'(x) = σ(x) · (1 + x · (1 − σ(x))); kept in pre.
        for (int64_t c = c0; c < c1; ++c) {
          const float x = pre[c - c0], s = sigmoid(x);
          pre[c - c0] = g[c] * s * (1.0f + x * (1.0f - s));
        }
        for (int64_t j = std::max<int64_t>(0, K - 1 - (t - first)); j < K; ++j) {
          const int64_t row = (b * T + t - K + 1 + j) * ld;
          for (int64_t c = c0; c < c1; ++c) {
            if (dinp != nullptr) dinp[row + c] += pre[c - c0] * weight[c * K + j];
            if (dweight != nullptr) dweight[c * K + j] += pre[c - c0] * inp[row + c];
          }
        }
      }
    }
  }
}

// torch.nn.functional.softplus (beta 1, threshold 20): x itself above the threshold.
static float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

void gdn_gate_forward(float* beta, float* g, const float* b, const float* a, const float* A_log,
                      const float* dt_bias, int64_t N, int64_t H) {
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t i = n * H + h;
      beta[i] = 1.0f / (1.0f + std::exp(-b[i]));
      g[i] = -std::exp(A_log[h]) * softplus(a[i] + dt_bias[h]);
    }
  }
}

void gdn_gate_backward(float* db, float* da, float* dA_log, float* ddt_bias, const float* dbeta,
                       const float* dg, const float* b, const float* a, const float* A_log,
                       const float* dt_bias, int64_t N, int64_t H) {
  for (int64_t h = 0; h < H; ++h) {
    const float decay_rate = std::exp(A_log[h]);
    float dA_log_h = 0.0f, ddt_bias_h = 0.0f;
    for (int64_t n = 0; n < N; ++n) {
      const int64_t i = n * H + h;
      const float beta = 1.0f / (1.0f + std::exp(-b[i]));
      if (db != nullptr) db[i] += dbeta[i] * beta * (1.0f - beta);
      const float x = a[i] + dt_bias[h];
      // g = −e^{A_log} · softplus(x): dg/dx = −e^{A_log} · σ(x) (1 above the threshold), and
      // dg/dA_log = g itself.
      const float dsoftplus = x > 20.0f ? 1.0f : 1.0f / (1.0f + std::exp(-x));
      const float dx = dg[i] * -decay_rate * dsoftplus;
      if (da != nullptr) da[i] += dx;
      ddt_bias_h += dx;
      dA_log_h += dg[i] * -decay_rate * softplus(x);
    }
    if (dA_log != nullptr) dA_log[h] += dA_log_h;
    if (ddt_bias != nullptr) ddt_bias[h] += ddt_bias_h;
  }
}

void gated_delta_rule_step(float* out, float* state, const float* q, const float* k,
                           const float* v, const float* beta, const float* g, int64_t B,
                           int64_t Hk, int64_t Hv, int64_t Dk, int64_t Dv, int64_t qk_ld,
                           int64_t v_ld) {
  const int64_t r = Hv / Hk;
  const float scale = 1.0f / std::sqrt(static_cast<float>(Dk));
#pragma omp parallel for collapse(2) schedule(static) if (worth_parallel(B * Hv * Dk * Dv))
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < Hv; ++j) {
      const float* qh = q + b * qk_ld + (j / r) * Dk;  // (Dk)
      const float* kh = k + b * qk_ld + (j / r) * Dk;  // (Dk)
      const float* vj = v + b * v_ld + j * Dv;         // (Dv)
      float* S = state + (b * Hv + j) * Dk * Dv;       // (Dk, Dv)
      float* o = out + (b * Hv + j) * Dv;              // (Dv)
      const float decay = std::exp(g[b * Hv + j]), bt = beta[b * Hv + j];
      // u = β (v − (αS)ᵀ k), then S = αS + k uᵀ, o = Sᵀ q · scale; o holds Sᵀk first.
      for (int64_t e = 0; e < Dv; ++e) o[e] = 0.0f;
      for (int64_t i = 0; i < Dk; ++i) {
        for (int64_t e = 0; e < Dv; ++e) {
          S[i * Dv + e] *= decay;
          o[e] += S[i * Dv + e] * kh[i];
        }
      }
      for (int64_t e = 0; e < Dv; ++e) o[e] = bt * (vj[e] - o[e]);  // u
      for (int64_t i = 0; i < Dk; ++i) {
        for (int64_t e = 0; e < Dv; ++e) S[i * Dv + e] += kh[i] * o[e];
      }
      for (int64_t e = 0; e < Dv; ++e) o[e] = 0.0f;
      for (int64_t i = 0; i < Dk; ++i) {
        for (int64_t e = 0; e < Dv; ++e) o[e] += S[i * Dv + e] * (qh[i] * scale);
      }
    }
  }
}

}  // namespace tessel::cpu
