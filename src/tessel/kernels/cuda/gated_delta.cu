// Gated DeltaNet's small kernels (Qwen3-Next): the causal depthwise conv1d + SiLU, the gates and
// the delta rule's one-token decoding step. The weight-like gradients (dweight, dA_log, ddt_bias)
// are column sums in a fixed order (column_sums, device.cuh).
#include "tessel/kernels/cuda/device.cuh"
#include "tessel/kernels/cuda/kernels.h"
#include "tessel/kernels/packed_documents.h"

namespace tessel::cuda {

namespace {

// The conv's pre-activation at row t, channel c: Σ_j w[c, j] · x[t − K + 1 + j] over the taps
// inside the sequence and t's document.
__device__ float conv_pre(const float* inp, const float* weight, const int32_t* key_start,
                          int64_t b, int64_t T, int64_t t, int64_t c, int64_t K, int64_t ld) {
  float pre = 0.0f;
  for (int64_t j = K - 1; j >= 0; --j) {  // from the current row back, until a document starts
    const int64_t s = t - K + 1 + j;
    if (s < 0) break;
    pre += weight[c * K + j] * inp[(b * T + s) * ld + c];
    if (starts_document(key_start, b, T, s)) break;
  }
  return pre;
}

// d(loss)/d(pre) at (b, t, c): dout · silu'(pre), silu'(x) = σ(x) · (1 + x · (1 − σ(x))).
__device__ float conv_dpre(const float* dout, const float* inp, const float* weight,
                           const int32_t* key_start, int64_t b, int64_t T, int64_t t, int64_t c,
                           int64_t C, int64_t K, int64_t ld) {
  const float x = conv_pre(inp, weight, key_start, b, T, t, c, K, ld), s = sigmoidf(x);
  return dout[(b * T + t) * C + c] * s * (1.0f + x * (1.0f - s));
}

__global__ void conv_forward_kernel(float* out, const float* inp, const float* weight,
                                    const int32_t* key_start, int64_t B, int64_t T, int64_t C,
                                    int64_t K, int64_t ld) {
  TESSEL_GRID_LOOP(i, B * T * C) {
    const int64_t c = i % C, t = i / C % T, b = i / (C * T);
    const float x = conv_pre(inp, weight, key_start, b, T, t, c, K, ld);
    out[i] = x * sigmoidf(x);
  }
}

// dinp[s, c] += Σ_j dpre[s + K − 1 − j, c] · w[c, j] over the rows t ≥ s of s's document.
__global__ void conv_dinp_kernel(float* dinp, const float* dout, const float* inp,
                                 const float* weight, const int32_t* key_start, int64_t B,
                                 int64_t T, int64_t C, int64_t K, int64_t ld) {
  TESSEL_GRID_LOOP(i, B * T * C) {
    const int64_t c = i % C, s = i / C % T, b = i / (C * T);
    float sum = 0.0f;
    for (int64_t j = K - 1; j >= 0; --j) {
      const int64_t t = s + K - 1 - j;
      if (t >= T || (t > s && starts_document(key_start, b, T, t))) break;
      sum += conv_dpre(dout, inp, weight, key_start, b, T, t, c, C, K, ld) * weight[c * K + j];
    }
    dinp[(b * T + s) * ld + c] += sum;
  }
}

// dweight[c, j] sums dpre[n, c] · x[n − K + 1 + j, c] over the rows n = b·T + t (0 outside the
// document): a column sum over N rows of C·K columns.
struct ConvWeightTerm {
  const float* dout;
  const float* inp;
  const float* weight;
  const int32_t* key_start;
  int64_t T, C, K, ld;
  __device__ float operator()(int64_t n, int64_t cj) const {
    const int64_t b = n / T, t = n % T, c = cj / K, j = cj % K, s = t - K + 1 + j;
    if (s < 0) return 0.0f;
    for (int64_t p = s + 1; p <= t; ++p)
      if (starts_document(key_start, b, T, p)) return 0.0f;
    return conv_dpre(dout, inp, weight, key_start, b, T, t, c, C, K, ld) *
           inp[(b * T + s) * ld + c];
  }
};

// torch's softplus (threshold 20) and its derivative.
__device__ float softplusf(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
__device__ float dsoftplusf(float x) { return x > 20.0f ? 1.0f : sigmoidf(x); }

__global__ void gate_forward_kernel(float* beta, float* g, const float* b, const float* a,
                                    const float* A_log, const float* dt_bias, int64_t N,
                                    int64_t H) {
  TESSEL_GRID_LOOP(i, N * H) {
    const int64_t h = i % H;
    beta[i] = sigmoidf(b[i]);
    g[i] = -expf(A_log[h]) * softplusf(a[i] + dt_bias[h]);
  }
}

__global__ void gate_backward_kernel(float* db, float* da, const float* dbeta, const float* dg,
                                     const float* b, const float* a, const float* A_log,
                                     const float* dt_bias, int64_t N, int64_t H) {
  TESSEL_GRID_LOOP(i, N * H) {
    const int64_t h = i % H;
    const float beta = sigmoidf(b[i]);
    if (db != nullptr) db[i] += dbeta[i] * beta * (1.0f - beta);
    if (da != nullptr) da[i] += dg[i] * -expf(A_log[h]) * dsoftplusf(a[i] + dt_bias[h]);
  }
}

// The per-head sums: dg · dg/dA_log (= dg · g) and dg · dg/d(dt_bias).
struct GateHeadTerm {
  const float* dg;
  const float* a;
  const float* A_log;
  const float* dt_bias;
  int64_t H;
  bool wrt_A_log;
  __device__ float operator()(int64_t n, int64_t h) const {
    const float x = a[n * H + h] + dt_bias[h];
    const float d = wrt_A_log ? softplusf(x) : dsoftplusf(x);
    return dg[n * H + h] * -expf(A_log[h]) * d;
  }
};

// One block per (b, value head j), one thread per state column e: S[:, e] ← αS[:, e]; u_e =
// β (v_e − S[:, e]·k); S[:, e] += k u_e; o_e = S[:, e]·q / sqrt(Dk). Columns are independent.
__global__ void delta_step_kernel(float* out, float* state, const float* q, const float* k,
                                  const float* v, const float* beta, const float* g, int64_t Hk,
                                  int64_t Hv, int64_t Dk, int64_t Dv, int64_t qk_ld,
                                  int64_t v_ld) {
  const int64_t b = blockIdx.x / Hv, j = blockIdx.x % Hv, h = j / (Hv / Hk);
  const float* qh = q + b * qk_ld + h * Dk;
  const float* kh = k + b * qk_ld + h * Dk;
  float* S = state + (b * Hv + j) * Dk * Dv;
  const float alpha = expf(g[b * Hv + j]), bt = beta[b * Hv + j];
  const float scale = rsqrtf(static_cast<float>(Dk));
  for (int64_t e = threadIdx.x; e < Dv; e += blockDim.x) {
    float kS = 0.0f;
    for (int64_t i = 0; i < Dk; ++i) {
      S[i * Dv + e] *= alpha;
      kS += S[i * Dv + e] * kh[i];
    }
    const float u = bt * (v[b * v_ld + j * Dv + e] - kS);
    float o = 0.0f;
    for (int64_t i = 0; i < Dk; ++i) {
      S[i * Dv + e] += kh[i] * u;
      o += S[i * Dv + e] * qh[i];
    }
    out[(b * Hv + j) * Dv + e] = o * scale;
  }
}

CudaScratch column_scratch;

}  // namespace

void causal_conv1d_silu_forward(float* out, const float* inp, const float* weight,
                                const int32_t* key_start, int64_t B, int64_t T, int64_t C,
                                int64_t K, int64_t ld) {
  launch_n("causal_conv1d_silu_forward", conv_forward_kernel, B * T * C, out, inp, weight,
           key_start, B, T, C, K, ld);
}

void causal_conv1d_silu_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                                 const float* weight, const int32_t* key_start, int64_t B,
                                 int64_t T, int64_t C, int64_t K, int64_t ld) {
  if (dinp != nullptr)
    launch_n("causal_conv1d_silu_backward", conv_dinp_kernel, B * T * C, dinp, dout, inp, weight,
             key_start, B, T, C, K, ld);
  column_sums(dweight, ConvWeightTerm{dout, inp, weight, key_start, T, C, K, ld}, B * T, C * K,
              column_scratch);
}

void gdn_gate_forward(float* beta, float* g, const float* b, const float* a, const float* A_log,
                      const float* dt_bias, int64_t N, int64_t H) {
  launch_n("gdn_gate_forward", gate_forward_kernel, N * H, beta, g, b, a, A_log, dt_bias, N, H);
}

void gdn_gate_backward(float* db, float* da, float* dA_log, float* ddt_bias, const float* dbeta,
                       const float* dg, const float* b, const float* a, const float* A_log,
                       const float* dt_bias, int64_t N, int64_t H) {
  if (db != nullptr || da != nullptr)
    launch_n("gdn_gate_backward", gate_backward_kernel, N * H, db, da, dbeta, dg, b, a, A_log,
             dt_bias, N, H);
  column_sums(dA_log, GateHeadTerm{dg, a, A_log, dt_bias, H, true}, N, H, column_scratch);
  column_sums(ddt_bias, GateHeadTerm{dg, a, A_log, dt_bias, H, false}, N, H, column_scratch);
}

void gated_delta_rule_step(float* out, float* state, const float* q, const float* k,
                           const float* v, const float* beta, const float* g, int64_t B,
                           int64_t Hk, int64_t Hv, int64_t Dk, int64_t Dv, int64_t qk_ld,
                           int64_t v_ld) {
  if (B * Hv == 0) return;
  launch("gated_delta_rule_step", delta_step_kernel, dim3(static_cast<unsigned>(B * Hv)),
         static_cast<int>(std::min<int64_t>(std::max<int64_t>(kWarp, (Dv + 31) / 32 * 32), 1024)),
         0, out, state, q, k, v, beta, g, Hk, Hv, Dk, Dv, qk_ld, v_ld);
}

}  // namespace tessel::cuda
