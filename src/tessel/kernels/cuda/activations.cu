// Element-wise activations: GELU (exact, erf; and the tanh form, Hugging Face "gelu_new"), SwiGLU (Llama's MLP) and
// the sigmoid gates (the shared expert's, gated attention's output gate).
#include "tessel/kernels/cuda/device.cuh"
#include "tessel/kernels/cuda/kernels.h"

namespace tessel::cuda {

namespace {

// As the CPU: 0.5·(1 + tanh(u)) = σ(2u), so gelu(x) = x · σ(2u), u = sqrt(2/π)·(x + 0.044715·x³),
// and gelu'(x) = σ(2u) + x · 2σ(2u)(1 - σ(2u)) · du/dx.
constexpr float kSqrt2OverPi = 0.7978845608f;
constexpr float kGeluCubic = 0.044715f;

__global__ void gelu_forward_kernel(float* out, const float* inp, int64_t n) {
  TESSEL_GRID_LOOP(i, n) {
    const float x = inp[i];
    out[i] = x * sigmoidf(2.0f * kSqrt2OverPi * (x + kGeluCubic * x * x * x));
  }
}

__global__ void gelu_backward_kernel(float* dinp, const float* dout, const float* inp, int64_t n) {
  TESSEL_GRID_LOOP(i, n) {
    const float x = inp[i];
    const float s = sigmoidf(2.0f * kSqrt2OverPi * (x + kGeluCubic * x * x * x));
    const float du_dx = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
    dinp[i] += dout[i] * (s + 2.0f * x * s * (1.0f - s) * du_dx);
  }
}

__global__ void swiglu_forward_kernel(float* out, const float* gate, const float* up, int64_t n) {
  TESSEL_GRID_LOOP(i, n) out[i] = gate[i] * sigmoidf(gate[i]) * up[i];
}

// silu'(x) = σ(x) · (1 + x · (1 - σ(x)))
__global__ void swiglu_backward_kernel(float* dgate, float* dup, const float* dout,
                                       const float* gate, const float* up, int64_t n) {
  TESSEL_GRID_LOOP(i, n) {
    const float s = sigmoidf(gate[i]);
    if (dgate != nullptr) dgate[i] += dout[i] * up[i] * s * (1.0f + gate[i] * (1.0f - s));
    if (dup != nullptr) dup[i] += dout[i] * gate[i] * s;
  }
}

__global__ void sigmoid_in_place_kernel(float* gate, int64_t N) {
  TESSEL_GRID_LOOP(n, N) gate[n] = sigmoidf(gate[n]);
}

__global__ void gate_accumulate_kernel(float* out, const float* gate, const float* y, int64_t N,
                                       int64_t C) {
  TESSEL_GRID_LOOP(i, N * C) out[i] += gate[i / C] * y[i];
}

// One warp per row: dy = gate · dout; dlogit = (dout · y) · gate · (1 − gate).
__global__ void sigmoid_gate_backward_kernel(float* dy, float* dlogit, const float* dout,
                                             const float* y, const float* gate, int64_t N,
                                             int64_t C) {
  const int64_t n = warp_row();
  if (n >= N) return;
  const float* g = dout + n * C;
  const float* y_n = y + n * C;
  float dot = 0.0f;
  for (int64_t c = lane_id(); c < C; c += kWarp) {
    dy[n * C + c] = gate[n] * g[c];
    dot += g[c] * y_n[c];
  }
  dot = warp_sum(dot);
  if (lane_id() == 0) dlogit[n] = dot * gate[n] * (1.0f - gate[n]);
}

// Gated attention's output gate: one thread per element of attn (N, H, D).
__global__ void output_gate_forward_kernel(float* out, const float* attn, const float* gate,
                                           int64_t N, int64_t H, int64_t D, int64_t gate_ld,
                                           int64_t gate_head_stride) {
  TESSEL_GRID_LOOP(i, N * H * D) {
    const int64_t d = i % D, h = i / D % H, n = i / (D * H);
    out[i] = attn[i] * sigmoidf(gate[n * gate_ld + h * gate_head_stride + d]);
  }
}

__global__ void output_gate_backward_kernel(float* dattn, float* dgate, const float* dout,
                                            const float* attn, const float* gate, int64_t N,
                                            int64_t H, int64_t D, int64_t gate_ld,
                                            int64_t gate_head_stride) {
  TESSEL_GRID_LOOP(i, N * H * D) {
    const int64_t d = i % D, h = i / D % H, n = i / (D * H);
    const int64_t at = n * gate_ld + h * gate_head_stride + d;
    const float sg = sigmoidf(gate[at]);
    if (dattn != nullptr) dattn[i] += dout[i] * sg;
    if (dgate != nullptr) dgate[at] += dout[i] * attn[i] * sg * (1.0f - sg);
  }
}

// As the CPU: gelu(x) = x · Φ(x), gelu'(x) = Φ(x) + x · φ(x).
constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;

__global__ void gelu_erf_forward_kernel(float* out, const float* inp, int64_t n) {
  TESSEL_GRID_LOOP(i, n) {
    const float x = inp[i];
    out[i] = x * 0.5f * (1.0f + erff(x * kInvSqrt2));
  }
}

__global__ void gelu_erf_backward_kernel(float* dinp, const float* dout, const float* inp, int64_t n) {
  TESSEL_GRID_LOOP(i, n) {
    const float x = inp[i];
    const float cdf = 0.5f * (1.0f + erff(x * kInvSqrt2));
    dinp[i] += dout[i] * (cdf + x * kInvSqrt2Pi * expf(-0.5f * x * x));
  }
}

}  // namespace

void gelu_erf_forward(float* out, const float* inp, int64_t n) {
  launch_n("gelu_erf_forward", gelu_erf_forward_kernel, n, out, inp, n);
}

void gelu_erf_backward(float* dinp, const float* dout, const float* inp, int64_t n) {
  if (dinp != nullptr) launch_n("gelu_erf_backward", gelu_erf_backward_kernel, n, dinp, dout, inp, n);
}

void gelu_forward(float* out, const float* inp, int64_t n) {
  launch_n("gelu_forward", gelu_forward_kernel, n, out, inp, n);
}

void gelu_backward(float* dinp, const float* dout, const float* inp, int64_t n) {
  if (dinp != nullptr) launch_n("gelu_backward", gelu_backward_kernel, n, dinp, dout, inp, n);
}

void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) {
  launch_n("swiglu_forward", swiglu_forward_kernel, n, out, gate, up, n);
}

void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                     const float* up, int64_t n) {
  if (dgate != nullptr || dup != nullptr)
    launch_n("swiglu_backward", swiglu_backward_kernel, n, dgate, dup, dout, gate, up, n);
}

// The gate becomes sigmoid(logits) in place first (a kernel of its own: every element of a row
// reads it).
void sigmoid_gate_forward(float* out, float* gate, const float* y, int64_t N, int64_t C) {
  launch_n("sigmoid_gate_forward", sigmoid_in_place_kernel, N, gate, N);
  launch_n("sigmoid_gate_forward", gate_accumulate_kernel, N * C, out, gate, y, N, C);
}

void sigmoid_gate_backward(float* dy, float* dlogit, const float* dout, const float* y,
                           const float* gate, int64_t N, int64_t C) {
  launch_rows("sigmoid_gate_backward", sigmoid_gate_backward_kernel, N, dy, dlogit, dout, y, gate,
              N, C);
}

void output_gate_forward(float* out, const float* attn, const float* gate, int64_t N, int64_t H,
                         int64_t D, int64_t gate_ld, int64_t gate_head_stride) {
  launch_n("output_gate_forward", output_gate_forward_kernel, N * H * D, out, attn, gate, N, H, D,
           gate_ld, gate_head_stride);
}

void output_gate_backward(float* dattn, float* dgate, const float* dout, const float* attn,
                          const float* gate, int64_t N, int64_t H, int64_t D, int64_t gate_ld,
                          int64_t gate_head_stride) {
  if (dattn != nullptr || dgate != nullptr)
    launch_n("output_gate_backward", output_gate_backward_kernel, N * H * D, dattn, dgate, dout,
             attn, gate, N, H, D, gate_ld, gate_head_stride);
}

}  // namespace tessel::cuda
