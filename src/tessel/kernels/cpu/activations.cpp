// Element-wise activations: GELU in its two forms — exact (erf; Megatron's default F.gelu, Hugging
// Face "gelu") and tanh (--openai-gelu; Hugging Face "gelu_new") — SwiGLU (Llama's MLP) and the
// sigmoid gates (the shared expert's, gated attention's output gate).
#include <cmath>

#include "tessel/kernels/cpu/kernels.h"
#include "tessel/kernels/cpu/vec_math.h"

namespace tessel::cpu {

// GELU's 0.5·(1 + tanh(u)) equals sigmoid(2u): the same function without 1 + tanh's cancellation
// for negative x. So gelu(x) = x · σ(2u), u = sqrt(2/π)·(x + 0.044715·x³), and
// gelu'(x) = σ(2u) + x · 2σ(2u)(1 - σ(2u)) · du/dx.
constexpr float kSqrt2OverPi = 0.7978845608f;
constexpr float kGeluCubic = 0.044715f;

void gelu_forward(float* out, const float* inp, int64_t n) {
#pragma omp parallel for simd schedule(static) if (worth_parallel(n))
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    out[i] = x * sigmoid(2.0f * kSqrt2OverPi * (x + kGeluCubic * x * x * x));
  }
}

void gelu_backward(float* dinp, const float* dout, const float* inp, int64_t n) {
  if (dinp == nullptr) return;
#pragma omp parallel for simd schedule(static) if (worth_parallel(n))
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float s = sigmoid(2.0f * kSqrt2OverPi * (x + kGeluCubic * x * x * x));
    const float du_dx = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
    dinp[i] += dout[i] * (s + 2.0f * x * s * (1.0f - s) * du_dx);
  }
}

// The exact GELU: gelu(x) = x · Φ(x), Φ(x) = 0.5·(1 + erf(x / sqrt(2))), and
// gelu'(x) = Φ(x) + x · φ(x), φ(x) = exp(-x²/2) / sqrt(2π).
constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;

void gelu_erf_forward(float* out, const float* inp, int64_t n) {
#pragma omp parallel for simd schedule(static) if (worth_parallel(n))
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    out[i] = x * 0.5f * (1.0f + erf_approx(x * kInvSqrt2));
  }
}

void gelu_erf_backward(float* dinp, const float* dout, const float* inp, int64_t n) {
  if (dinp == nullptr) return;
#pragma omp parallel for simd schedule(static) if (worth_parallel(n))
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float cdf = 0.5f * (1.0f + erf_approx(x * kInvSqrt2));
    dinp[i] += dout[i] * (cdf + x * kInvSqrt2Pi * exp_approx(-0.5f * x * x));
  }
}

void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) {
#pragma omp parallel for simd schedule(static) if (worth_parallel(n))
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] * sigmoid(gate[i]) * up[i];
}

void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                     const float* up, int64_t n) {
  if (dgate != nullptr) {
    // silu'(x) = σ(x) · (1 + x · (1 - σ(x)))
#pragma omp parallel for simd schedule(static) if (worth_parallel(n))
    for (int64_t i = 0; i < n; ++i) {
      const float s = sigmoid(gate[i]);
      dgate[i] += dout[i] * up[i] * s * (1.0f + gate[i] * (1.0f - s));
    }
  }
  if (dup != nullptr) {
#pragma omp parallel for simd schedule(static) if (worth_parallel(n))
    for (int64_t i = 0; i < n; ++i) dup[i] += dout[i] * gate[i] * sigmoid(gate[i]);
  }
}

// The gate as Hugging Face's Qwen-MoE computes it (torch.sigmoid), the products in order.
void sigmoid_gate_forward(float* out, float* gate, const float* y, int64_t N, int64_t C) {
  for (int64_t n = 0; n < N; ++n) {
    gate[n] = 1.0f / (1.0f + std::exp(-gate[n]));
    float* o = out + n * C;
    const float* y_n = y + n * C;
    for (int64_t c = 0; c < C; ++c) o[c] += gate[n] * y_n[c];
  }
}

void sigmoid_gate_backward(float* dy, float* dlogit, const float* dout, const float* y,
                           const float* gate, int64_t N, int64_t C) {
  for (int64_t n = 0; n < N; ++n) {
    const float* g = dout + n * C;
    const float* y_n = y + n * C;
    float dot = 0;
    for (int64_t c = 0; c < C; ++c) {
      dy[n * C + c] = gate[n] * g[c];
      dot += g[c] * y_n[c];
    }
    dlogit[n] = dot * gate[n] * (1.0f - gate[n]);
  }
}

// Gated attention's gate: torch.sigmoid in float, as Hugging Face's Qwen3NextAttention.
void output_gate_forward(float* out, const float* attn, const float* gate, int64_t N, int64_t H,
                         int64_t D, int64_t gate_ld, int64_t gate_head_stride) {
#pragma omp parallel for schedule(static) if (worth_parallel(N * H * D))
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t h = 0; h < H; ++h) {
      const float* a = attn + (n * H + h) * D;                      // (D)
      const float* z = gate + n * gate_ld + h * gate_head_stride;  // (D)
      float* o = out + (n * H + h) * D;                             // (D)
      for (int64_t i = 0; i < D; ++i) o[i] = a[i] * (1.0f / (1.0f + std::exp(-z[i])));
    }
  }
}

void output_gate_backward(float* dattn, float* dgate, const float* dout, const float* attn,
                          const float* gate, int64_t N, int64_t H, int64_t D, int64_t gate_ld,
                          int64_t gate_head_stride) {
#pragma omp parallel for schedule(static) if (worth_parallel(N * H * D))
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t row = (n * H + h) * D, gate_at = n * gate_ld + h * gate_head_stride;
      for (int64_t i = 0; i < D; ++i) {
        const float sg = 1.0f / (1.0f + std::exp(-gate[gate_at + i]));
        if (dattn != nullptr) dattn[row + i] += dout[row + i] * sg;
        if (dgate != nullptr) dgate[gate_at + i] += dout[row + i] * attn[row + i] * sg * (1.0f - sg);
      }
    }
  }
}

}  // namespace tessel::cpu
