// Softmax cross-entropy over the vocabulary, one row per token. With V ≈ 50k this is one of the
// largest memory streams of a step, so each row is read twice (max, then exp-sum) and a row
// (≈ 200 KB) stays in L2 between the passes; the exp is vectorised (exp_approx, vec_math.h).
#include <cmath>

#include "tessel/core/error.h"
#include "tessel/kernels/cpu/kernels.h"
#include "tessel/kernels/cpu/vec_math.h"

namespace tessel::cpu {

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
#pragma omp parallel for schedule(static) if (worth_parallel(N * V))
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
#pragma omp parallel for schedule(static) if (worth_parallel(N * V))
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
