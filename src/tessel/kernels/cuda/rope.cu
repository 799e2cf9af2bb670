// Rotary position embedding, Hugging Face Llama's rotate-half layout: the pair rotated by angle i
// is (x[i], x[i + rot/2]); partial RoPE rotates the first rot_dim values of a head only.
#include "tessel/kernels/cuda/device.cuh"
#include "tessel/kernels/cuda/kernels.h"

namespace tessel::cuda {

namespace {

// In float and in this order, as Hugging Face computes inv_freq and the angles.
__global__ void rope_tables_kernel(float* cos, float* sin, int64_t max_pos, int64_t rot_dim,
                                   float base) {
  const int64_t half = rot_dim / 2;
  TESSEL_GRID_LOOP(j, max_pos * half) {
    const int64_t p = j / half, i = j % half;
    const float inv_freq =
        1.0f / powf(base, static_cast<float>(2 * i) / static_cast<float>(rot_dim));
    const float angle = static_cast<float>(p) * inv_freq;
    cos[j] = cosf(angle);
    sin[j] = sinf(angle);
  }
}

// Rotates every head of every row by +angle (sign = 1) or -angle (sign = -1): one thread per pair.
__global__ void rotate_kernel(float* x, const int32_t* positions, const float* cos,
                              const float* sin, int64_t N, int64_t heads, int64_t head_dim,
                              int64_t rot_dim, int64_t ld, float sign) {
  const int64_t half = rot_dim / 2;
  TESSEL_GRID_LOOP(j, N * heads * half) {
    const int64_t i = j % half, h = j / half % heads, n = j / (half * heads);
    const float c = cos[positions[n] * half + i];
    const float s = sign * sin[positions[n] * half + i];
    float* a = x + n * ld + h * head_dim + i;  // first half
    float* b = a + half;                       // second half
    const float ai = *a, bi = *b;
    *a = ai * c - bi * s;
    *b = bi * c + ai * s;
  }
}

}  // namespace

void rope_tables(float* cos, float* sin, int64_t max_pos, int64_t rot_dim, float base) {
  launch_n("rope_tables", rope_tables_kernel, max_pos * (rot_dim / 2), cos, sin, max_pos, rot_dim,
           base);
}

void rope_forward(float* x, const int32_t* positions, const float* cos, const float* sin, int64_t N,
                  int64_t heads, int64_t head_dim, int64_t rot_dim, int64_t ld) {
  launch_n("rope_forward", rotate_kernel, N * heads * (rot_dim / 2), x, positions, cos, sin, N,
           heads, head_dim, rot_dim, ld, 1.0f);
}

// A rotation's transpose is the rotation by the opposite angle.
void rope_backward(float* dx, const int32_t* positions, const float* cos, const float* sin,
                   int64_t N, int64_t heads, int64_t head_dim, int64_t rot_dim, int64_t ld) {
  launch_n("rope_backward", rotate_kernel, N * heads * (rot_dim / 2), dx, positions, cos, sin, N,
           heads, head_dim, rot_dim, ld, -1.0f);
}

}  // namespace tessel::cuda
