// Element-wise activations: GELU (tanh form, Hugging Face "gelu_new") and SwiGLU (Llama's MLP).
#include <bit>
#include <cmath>

#include "tessel/kernels/cpu/kernels.h"

namespace tessel::cpu {

// exp(x) in plain arithmetic, so that GCC vectorises the loops that call it (glibc's expf is a
// library call and stays scalar without -ffast-math). exp(x) = 2^k · exp(r) with k = round(x /
// ln 2) and |r| ≤ ln2 / 2, where degree-7 Taylor is within 1e-7 relative. Inputs below -87 give
// 0, above 88 give exp(88) (finite, so sigmoid's 1 / (1 + exp(-x)) stays well defined).
static inline float exp_approx(float x) {
  const float xc = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float round_magic = 12582912.0f;  // 1.5·2^23: adding it rounds to an integer
  const float k = (xc * 1.44269504f + round_magic) - round_magic;
  const float r = (xc - k * 0.693145752f) - k * 1.42860682e-6f;  // ln 2 split in two parts
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float two_k = std::bit_cast<float>((static_cast<int32_t>(k) + 127) << 23);
  return x < -87.0f ? 0.0f : p * two_k;
}

static inline float sigmoid(float x) { return 1.0f / (1.0f + exp_approx(-x)); }

// GELU's 0.5·(1 + tanh(u)) equals sigmoid(2u): the same function without 1 + tanh's cancellation
// for negative x. So gelu(x) = x · σ(2u), u = sqrt(2/π)·(x + 0.044715·x³), and
// gelu'(x) = σ(2u) + x · 2σ(2u)(1 - σ(2u)) · du/dx.
constexpr float kSqrt2OverPi = 0.7978845608f;
constexpr float kGeluCubic = 0.044715f;

void gelu_forward(float* out, const float* inp, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    out[i] = x * sigmoid(2.0f * kSqrt2OverPi * (x + kGeluCubic * x * x * x));
  }
}

void gelu_backward(float* dinp, const float* dout, const float* inp, int64_t n) {
  if (dinp == nullptr) return;
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float s = sigmoid(2.0f * kSqrt2OverPi * (x + kGeluCubic * x * x * x));
    const float du_dx = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
    dinp[i] += dout[i] * (s + 2.0f * x * s * (1.0f - s) * du_dx);
  }
}

void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] * sigmoid(gate[i]) * up[i];
}

void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                     const float* up, int64_t n) {
  if (dgate != nullptr) {
    // silu'(x) = σ(x) · (1 + x · (1 - σ(x)))
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const float s = sigmoid(gate[i]);
      dgate[i] += dout[i] * up[i] * s * (1.0f + gate[i] * (1.0f - s));
    }
  }
  if (dup != nullptr) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) dup[i] += dout[i] * gate[i] * sigmoid(gate[i]);
  }
}

}  // namespace tessel::cpu
