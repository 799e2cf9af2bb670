// LayerNorm (GPT-2), RMSNorm (Llama; zero-centred with a gain offset of 1), Gated DeltaNet's gated
// RMSNorm and l2norm: one warp per row (token, or head). The backward's weight and bias gradients
// are column sums over the rows in a fixed order (column_sums, device.cuh).
#include "tessel/kernels/cuda/device.cuh"
#include "tessel/kernels/cuda/kernels.h"

namespace tessel::cuda {

namespace {

__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                         const float* weight, const float* bias, int64_t N,
                                         int64_t C, float eps) {
  const int64_t n = warp_row();
  if (n >= N) return;
  const float* x = inp + n * C;  // (C)
  float sum = 0.0f;
  for (int64_t c = lane_id(); c < C; c += kWarp) sum += x[c];
  const float m = warp_sum(sum) / C;
  // Two passes (mean, then squared deviations) avoid E[x²] - E[x]²'s cancellation.
  float var = 0.0f;
  for (int64_t c = lane_id(); c < C; c += kWarp) var += (x[c] - m) * (x[c] - m);
  const float s = 1.0f / sqrtf(warp_sum(var) / C + eps);  // biased variance, as torch
  float* o = out + n * C;                                 // (C)
  for (int64_t c = lane_id(); c < C; c += kWarp) o[c] = (x[c] - m) * s * weight[c] + bias[c];
  if (lane_id() == 0) {
    mean[n] = m;
    rstd[n] = s;
  }
}

// With norm = (x - m)·s and dnorm = g·weight: dx += s · (dnorm - mean(dnorm) - norm ·
// mean(dnorm · norm)).
__global__ void layernorm_dinp_kernel(float* dinp, const float* dout, const float* inp,
                                      const float* weight, const float* mean, const float* rstd,
                                      int64_t N, int64_t C) {
  const int64_t n = warp_row();
  if (n >= N) return;
  const float* x = inp + n * C;   // (C)
  const float* g = dout + n * C;  // (C)
  const float m = mean[n], s = rstd[n];
  float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
  for (int64_t c = lane_id(); c < C; c += kWarp) {
    const float dnorm = g[c] * weight[c];
    dnorm_sum += dnorm;
    dnorm_norm_sum += dnorm * (x[c] - m) * s;
  }
  const float dnorm_mean = warp_sum(dnorm_sum) / C;
  const float dnorm_norm_mean = warp_sum(dnorm_norm_sum) / C;
  float* dx = dinp + n * C;  // (C)
  for (int64_t c = lane_id(); c < C; c += kWarp) {
    const float norm = (x[c] - m) * s;
    dx[c] += (g[c] * weight[c] - dnorm_mean - norm * dnorm_norm_mean) * s;
  }
}

__global__ void rmsnorm_forward_kernel(float* out, float* rstd, const float* inp,
                                       const float* weight, int64_t N, int64_t C, float eps,
                                       float gain_offset) {
  const int64_t n = warp_row();
  if (n >= N) return;
  const float* x = inp + n * C;  // (C)
  float sum_sq = 0.0f;
  for (int64_t c = lane_id(); c < C; c += kWarp) sum_sq += x[c] * x[c];
  const float s = 1.0f / sqrtf(warp_sum(sum_sq) / C + eps);
  float* o = out + n * C;  // (C)
  // Hugging Face's order: (gain_offset + weight) · (x · rstd), as the CPU reference.
  for (int64_t c = lane_id(); c < C; c += kWarp) o[c] = (gain_offset + weight[c]) * (x[c] * s);
  if (lane_id() == 0) rstd[n] = s;
}

// With gain = offset + weight, d(rstd)/dx = -rstd³ · x / C, so
// dx += s · (g·gain - x · s² · mean(g·gain·x)).
__global__ void rmsnorm_dinp_kernel(float* dinp, const float* dout, const float* inp,
                                    const float* weight, const float* rstd, int64_t N, int64_t C,
                                    float gain_offset) {
  const int64_t n = warp_row();
  if (n >= N) return;
  const float* x = inp + n * C;   // (C)
  const float* g = dout + n * C;  // (C)
  const float s = rstd[n];
  float dot = 0.0f;
  for (int64_t c = lane_id(); c < C; c += kWarp) dot += g[c] * (gain_offset + weight[c]) * x[c];
  const float k = s * s * warp_sum(dot) / C;
  float* dx = dinp + n * C;  // (C)
  for (int64_t c = lane_id(); c < C; c += kWarp)
    dx[c] += (g[c] * (gain_offset + weight[c]) - x[c] * k) * s;
}

// Qwen3NextRMSNormGated, as the CPU: (weight · (x · rstd)) · silu(z).
__global__ void gated_rmsnorm_forward_kernel(float* out, float* rstd, const float* inp,
                                             const float* gate, const float* weight, int64_t N,
                                             int64_t C, float eps) {
  const int64_t n = warp_row();
  if (n >= N) return;
  const float* x = inp + n * C;   // (C)
  const float* z = gate + n * C;  // (C)
  float sum_sq = 0.0f;
  for (int64_t c = lane_id(); c < C; c += kWarp) sum_sq += x[c] * x[c];
  const float s = 1.0f / sqrtf(warp_sum(sum_sq) / C + eps);
  float* o = out + n * C;  // (C)
  for (int64_t c = lane_id(); c < C; c += kWarp)
    o[c] = weight[c] * (x[c] * s) * (z[c] * sigmoidf(z[c]));
  if (lane_id() == 0) rstd[n] = s;
}

// dx: the plain RMSNorm's with the gain weight · silu(z); dz = dout · weight · x · rstd · silu'(z).
__global__ void gated_rmsnorm_backward_kernel(float* dinp, float* dgate, const float* dout,
                                              const float* inp, const float* gate,
                                              const float* weight, const float* rstd, int64_t N,
                                              int64_t C) {
  const int64_t n = warp_row();
  if (n >= N) return;
  const float* x = inp + n * C;   // (C)
  const float* z = gate + n * C;  // (C)
  const float* g = dout + n * C;  // (C)
  const float s = rstd[n];
  if (dinp != nullptr) {
    float dot = 0.0f;
    for (int64_t c = lane_id(); c < C; c += kWarp)
      dot += g[c] * weight[c] * z[c] * sigmoidf(z[c]) * x[c];
    const float k = s * s * warp_sum(dot) / C;
    for (int64_t c = lane_id(); c < C; c += kWarp)
      dinp[n * C + c] += (g[c] * weight[c] * z[c] * sigmoidf(z[c]) - x[c] * k) * s;
  }
  if (dgate != nullptr) {
    for (int64_t c = lane_id(); c < C; c += kWarp) {
      const float sg = sigmoidf(z[c]);
      dgate[n * C + c] += g[c] * weight[c] * (x[c] * s) * sg * (1.0f + z[c] * (1.0f - sg));
    }
  }
}

// FLA's l2norm: out = x · rsqrt(Σ x² + 1e-6), one warp per (row, head).
__global__ void l2norm_forward_kernel(float* out, float* rstd, const float* inp, int64_t N,
                                      int64_t heads, int64_t D, int64_t ld) {
  const int64_t nh = warp_row();
  if (nh >= N * heads) return;
  const int64_t at = nh / heads * ld + nh % heads * D;
  float sum_sq = 0.0f;
  for (int64_t i = lane_id(); i < D; i += kWarp) sum_sq += inp[at + i] * inp[at + i];
  const float s = 1.0f / sqrtf(warp_sum(sum_sq) + 1e-6f);
  for (int64_t i = lane_id(); i < D; i += kWarp) out[at + i] = inp[at + i] * s;
  if (lane_id() == 0) rstd[nh] = s;
}

__global__ void l2norm_backward_kernel(float* dinp, const float* dout, const float* out,
                                       const float* rstd, int64_t N, int64_t heads, int64_t D,
                                       int64_t ld) {
  const int64_t nh = warp_row();
  if (nh >= N * heads) return;
  const int64_t at = nh / heads * ld + nh % heads * D;
  float dot = 0.0f;
  for (int64_t i = lane_id(); i < D; i += kWarp) dot += out[at + i] * dout[at + i];
  dot = warp_sum(dot);
  const float s = rstd[nh];
  for (int64_t i = lane_id(); i < D; i += kWarp) dinp[at + i] += s * (dout[at + i] - out[at + i] * dot);
}

// The terms the weight and bias gradients sum over rows.
struct NormWeightTerm {  // g · norm, norm = (x - mean)·rstd (mean nullptr: RMSNorm)
  const float* dout;
  const float* inp;
  const float* mean;
  const float* rstd;
  int64_t C;
  __device__ float operator()(int64_t n, int64_t c) const {
    const float centred = mean != nullptr ? inp[n * C + c] - mean[n] : inp[n * C + c];
    return dout[n * C + c] * centred * rstd[n];
  }
};

// The gated norm's weight term: g · x · rstd · silu(z).
struct GatedNormWeightTerm {
  const float* dout;
  const float* inp;
  const float* gate;
  const float* rstd;
  int64_t C;
  __device__ float operator()(int64_t n, int64_t c) const {
    const float z = gate[n * C + c];
    return dout[n * C + c] * (inp[n * C + c] * rstd[n]) * (z * sigmoidf(z));
  }
};

CudaScratch column_scratch;

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C, float eps) {
  launch_rows("layernorm_forward", layernorm_forward_kernel, N, out, mean, rstd, inp, weight, bias,
              N, C, eps);
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int64_t N, int64_t C) {
  if (dinp != nullptr)
    launch_rows("layernorm_backward", layernorm_dinp_kernel, N, dinp, dout, inp, weight, mean, rstd,
                N, C);
  column_sums(dweight, NormWeightTerm{dout, inp, mean, rstd, C}, N, C, column_scratch);
  column_sums(dbias, RowValue{dout, C}, N, C, column_scratch);
}

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N,
                     int64_t C, float eps, float gain_offset) {
  launch_rows("rmsnorm_forward", rmsnorm_forward_kernel, N, out, rstd, inp, weight, N, C, eps,
              gain_offset);
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int64_t N, int64_t C,
                      float gain_offset) {
  if (dinp != nullptr)
    launch_rows("rmsnorm_backward", rmsnorm_dinp_kernel, N, dinp, dout, inp, weight, rstd, N, C,
                gain_offset);
  column_sums(dweight, NormWeightTerm{dout, inp, nullptr, rstd, C}, N, C, column_scratch);
}

void gated_rmsnorm_forward(float* out, float* rstd, const float* inp, const float* gate,
                           const float* weight, int64_t N, int64_t C, float eps) {
  launch_rows("gated_rmsnorm_forward", gated_rmsnorm_forward_kernel, N, out, rstd, inp, gate,
              weight, N, C, eps);
}

void gated_rmsnorm_backward(float* dinp, float* dgate, float* dweight, const float* dout,
                            const float* inp, const float* gate, const float* weight,
                            const float* rstd, int64_t N, int64_t C) {
  if (dinp != nullptr || dgate != nullptr)
    launch_rows("gated_rmsnorm_backward", gated_rmsnorm_backward_kernel, N, dinp, dgate, dout, inp,
                gate, weight, rstd, N, C);
  column_sums(dweight, GatedNormWeightTerm{dout, inp, gate, rstd, C}, N, C, column_scratch);
}

void l2norm_forward(float* out, float* rstd, const float* inp, int64_t N, int64_t heads, int64_t D,
                    int64_t ld) {
  launch_rows("l2norm_forward", l2norm_forward_kernel, N * heads, out, rstd, inp, N, heads, D, ld);
}

void l2norm_backward(float* dinp, const float* dout, const float* out, const float* rstd,
                     int64_t N, int64_t heads, int64_t D, int64_t ld) {
  if (dinp != nullptr)
    launch_rows("l2norm_backward", l2norm_backward_kernel, N * heads, dinp, dout, out, rstd, N,
                heads, D, ld);
}

}  // namespace tessel::cuda
