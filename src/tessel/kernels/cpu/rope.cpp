// Rotary position embedding, Hugging Face Llama's rotate-half layout: the pair rotated by
// angle i is (x[i], x[i + rot/2]), not (x[2i], x[2i+1]) as in the RoPE paper. Partial RoPE
// (Qwen3-Next) rotates the first rot_dim values of a head and leaves the rest.
#include <cmath>

#include "tessel/kernels/cpu/kernels.h"
#include "tessel/kernels/cpu/vec_math.h"

namespace tessel::cpu {

void rope_tables(float* cos, float* sin, int64_t max_pos, int64_t rot_dim, float base) {
  const int64_t half = rot_dim / 2;
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < max_pos; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      // In float and in this order, as Hugging Face computes inv_freq and the angles.
      const float inv_freq =
          1.0f / std::pow(base, static_cast<float>(2 * i) / static_cast<float>(rot_dim));
      const float angle = static_cast<float>(p) * inv_freq;
      cos[p * half + i] = std::cos(angle);
      sin[p * half + i] = std::sin(angle);
    }
  }
}

// Rotates the first rot_dim values of every head of every row by +angle (sign = 1) or -angle
// (sign = -1).
static void rotate(float* x, const int32_t* positions, const float* cos, const float* sin,
                   int64_t N, int64_t heads, int64_t head_dim, int64_t rot_dim, int64_t ld,
                   float sign) {
  const int64_t half = rot_dim / 2;
#pragma omp parallel for schedule(static) if (worth_parallel(N * heads * head_dim))
  for (int64_t n = 0; n < N; ++n) {
    const float* c = cos + positions[n] * half;  // (rot/2)
    const float* s = sin + positions[n] * half;  // (rot/2)
    for (int64_t h = 0; h < heads; ++h) {
      float* a = x + n * ld + h * head_dim;  // first half (rot/2)
      float* b = a + half;                   // second half (rot/2)
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        const float si = sign * s[i];
        const float ai = a[i], bi = b[i];
        a[i] = ai * c[i] - bi * si;
        b[i] = bi * c[i] + ai * si;
      }
    }
  }
}

void rope_forward(float* x, const int32_t* positions, const float* cos, const float* sin, int64_t N,
                  int64_t heads, int64_t head_dim, int64_t rot_dim, int64_t ld) {
  rotate(x, positions, cos, sin, N, heads, head_dim, rot_dim, ld, 1.0f);
}

// A rotation's transpose is the rotation by the opposite angle.
void rope_backward(float* dx, const int32_t* positions, const float* cos, const float* sin,
                   int64_t N, int64_t heads, int64_t head_dim, int64_t rot_dim, int64_t ld) {
  rotate(dx, positions, cos, sin, N, heads, head_dim, rot_dim, ld, -1.0f);
}

}  // namespace tessel::cpu
