// Softmax cross-entropy over the vocabulary, one row per token. With V ≈ 50k this is one of the
// largest memory streams of a step, so each row is read twice (max, then exp-sum) and a row
// (≈ 200 KB) stays in L2 between the passes; the exp is vectorised (exp_approx below).
#include <bit>
#include <cmath>

#include "tessel/core/error.h"
#include "tessel/kernels/cpu/kernels.h"

namespace tessel::cpu {

// exp(x) in plain arithmetic, so that GCC vectorises the loops that call it (glibc's expf is a
// library call and stays scalar without -ffast-math). exp(x) = 2^k · exp(r) with k = round(x /
// ln 2) and |r| ≤ ln2 / 2, where degree-7 Taylor is within 1e-7 relative. Inputs below -87 give
// 0, above 88 give exp(88). (The same function as in activations.cpp.)
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

static void check_targets(const int32_t* targets, int64_t N, int64_t V) {
  for (int64_t n = 0; n < N; ++n) {
    TESSEL_CHECK(targets[n] >= 0 && targets[n] < V,
                 "cross_entropy: target {} of row {} is outside the vocabulary [0, {})", targets[n],
                 n, V);
  }
}

void cross_entropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                           int64_t N, int64_t V) {
  check_targets(targets, N, V);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = logits + n * V;  // (V)
    float max = x[0];
#pragma omp simd reduction(max : max)
    for (int64_t v = 0; v < V; ++v) max = x[v] > max ? x[v] : max;
    // Subtracting the max keeps every exp in (0, 1]: no overflow, and the largest term is exact.
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t v = 0; v < V; ++v) sum += exp_approx(x[v] - max);
    lse[n] = max + std::log(sum);
    losses[n] = lse[n] - x[targets[n]];
  }
}

void cross_entropy_backward(float* dlogits, const float* logits, const float* lse,
                            const int32_t* targets, float grad_scale, int64_t N, int64_t V) {
  check_targets(targets, N, V);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = logits + n * V;  // (V)
    float* d = dlogits + n * V;       // (V), may be x itself
    const float l = lse[n];
    // simd: each element reads x[v] before writing d[v], which is safe when d == x.
#pragma omp simd
    for (int64_t v = 0; v < V; ++v) d[v] = exp_approx(x[v] - l) * grad_scale;
    d[targets[n]] -= grad_scale;
  }
}

}  // namespace tessel::cpu
