// Softmax cross-entropy over the vocabulary, one row per token. With V ≈ 50k this is one of the
// largest memory streams of a step, so each row is read twice (max, then exp-sum) and a row
// (≈ 200 KB) stays in L2 between the passes; the exp is vectorised (exp_approx, vec_math.h).
#include <algorithm>
#include <cmath>

#include "tessel/core/error.h"
#include "tessel/kernels/cpu/kernels.h"
#include "tessel/kernels/cpu/vec_math.h"

namespace tessel::cpu {

void cross_entropy_partial_forward(float* row_max, float* row_sumexp, float* target_logit,
                                   const float* logits, const int32_t* targets,
                                   int64_t vocab_start, int64_t N, int64_t V, int64_t V_valid) {
#pragma omp parallel for schedule(static) if (worth_parallel(N * V))
  for (int64_t n = 0; n < N; ++n) {
    const float* x = logits + n * V;  // (V)
    float max = -INFINITY;
#pragma omp simd reduction(max : max)
    for (int64_t v = 0; v < V_valid; ++v) max = x[v] > max ? x[v] : max;
    // Subtracting the max keeps every exp in (0, 1]: no overflow, and the largest term is exact.
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t v = 0; v < V_valid; ++v) sum += exp_approx(x[v] - max);
    row_max[n] = max;
    row_sumexp[n] = sum;
    const int64_t t = targets[n] - vocab_start;
    target_logit[n] = t >= 0 && t < V_valid ? x[t] : 0.0f;
  }
}

void cross_entropy_backward(float* dlogits, const float* logits, const float* lse,
                            const int32_t* targets, int64_t vocab_start, float grad_scale,
                            int64_t N, int64_t V, int64_t V_valid) {
#pragma omp parallel for schedule(static) if (worth_parallel(N * V))
  for (int64_t n = 0; n < N; ++n) {
    const float* x = logits + n * V;  // (V)
    float* d = dlogits + n * V;       // (V), may be x itself
    if (targets[n] < 0) {             // left out of the loss
      std::fill(d, d + V, 0.0f);
      continue;
    }
    const float l = lse[n];
    // simd: each element reads x[v] before writing d[v], which is safe when d == x.
#pragma omp simd
    for (int64_t v = 0; v < V_valid; ++v) d[v] = exp_approx(x[v] - l) * grad_scale;
    for (int64_t v = V_valid; v < V; ++v) d[v] = 0.0f;
    const int64_t t = targets[n] - vocab_start;
    if (t >= 0 && t < V_valid) d[t] -= grad_scale;
  }
}

void cross_entropy_rescale(float* row_sumexp, const float* row_max, const float* global_max,
                           int64_t N) {
  for (int64_t n = 0; n < N; ++n) row_sumexp[n] *= std::exp(row_max[n] - global_max[n]);
}

double cross_entropy_finish(float* lse, const float* global_max, const float* row_sumexp,
                            const float* target_logit, const int32_t* targets, int64_t N) {
  double loss_sum = 0;
  for (int64_t n = 0; n < N; ++n) {
    lse[n] = global_max[n] + std::log(row_sumexp[n]);
    if (targets[n] >= 0) loss_sum += lse[n] - target_logit[n];
  }
  return loss_sum;
}

}  // namespace tessel::cpu
