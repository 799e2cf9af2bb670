// LayerNorm (GPT-2), RMSNorm (Llama; zero-centred with a gain offset of 1, Qwen3-Next), Gated
// DeltaNet's gated RMSNorm and its l2norm of q and k. One row per token (or head); rows run in
// parallel.
//
// Backward sums dweight/dbias over rows. Each thread sums its own (static, contiguous) block of
// rows into a private buffer, then the buffers are added in thread order, so for a given thread
// count the result is the same on every run.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "tessel/kernels/cpu/kernels.h"
#include "tessel/kernels/cpu/vec_math.h"

namespace tessel::cpu {

// Scratch for the per-thread partial sums: `per_thread` floats for each of omp_get_max_threads()
// threads, zeroed. Grows once to the largest size asked for, then is reused.
static float* zeroed_thread_partials(int64_t per_thread) {
  thread_local std::vector<float> partials;
  const size_t size = static_cast<size_t>(per_thread) * omp_get_max_threads();
  if (partials.size() < size) partials.resize(size);
  std::fill(partials.begin(), partials.begin() + size, 0.0f);
  return partials.data();
}

// dst (C) += Σ_t partials[t·stride + c] over the team's threads, in thread order. Call inside a
// parallel region, after the partials are complete (an `omp for` ended with its barrier).
static void add_thread_partials(float* dst, const float* partials, int64_t stride, int64_t C) {
  const int threads = omp_get_num_threads();
#pragma omp for schedule(static)
  for (int64_t c = 0; c < C; ++c) {
    float sum = 0.0f;
    for (int t = 0; t < threads; ++t) sum += partials[t * stride + c];
    dst[c] += sum;
  }
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C, float eps) {
#pragma omp parallel for schedule(static) if (worth_parallel(N * C))
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;  // (C)
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < C; ++c) sum += x[c];
    const float m = sum / C;
    // Two passes (mean, then squared deviations) avoid E[x²] - E[x]²'s cancellation.
    float var = 0.0f;
#pragma omp simd reduction(+ : var)
    for (int64_t c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    const float s = 1.0f / std::sqrt(var / C + eps);  // biased variance, as torch
    float* o = out + n * C;                           // (C)
    for (int64_t c = 0; c < C; ++c) o[c] = (x[c] - m) * s * weight[c] + bias[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int64_t N, int64_t C) {
  float* partials = zeroed_thread_partials(2 * C);  // per thread: dweight (C), dbias (C)
#pragma omp parallel if (worth_parallel(N * C))
  {
    float* dweight_t = partials + omp_get_thread_num() * 2 * C;
    float* dbias_t = dweight_t + C;
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const float* x = inp + n * C;   // (C)
      const float* g = dout + n * C;  // (C)
      const float m = mean[n], s = rstd[n];
      // With norm = (x - m)·s and dnorm = g·weight:
      // dx = s · (dnorm - mean(dnorm) - norm · mean(dnorm · norm)).
      float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
      for (int64_t c = 0; c < C; ++c) {
        const float norm = (x[c] - m) * s;
        const float dnorm = g[c] * weight[c];
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * norm;
      }
      dnorm_mean /= C;
      dnorm_norm_mean /= C;
      if (dinp != nullptr) {
        float* dx = dinp + n * C;  // (C)
        for (int64_t c = 0; c < C; ++c) {
          const float norm = (x[c] - m) * s;
          dx[c] += (g[c] * weight[c] - dnorm_mean - norm * dnorm_norm_mean) * s;
        }
      }
      for (int64_t c = 0; c < C; ++c) {
        dweight_t[c] += g[c] * (x[c] - m) * s;
        dbias_t[c] += g[c];
      }
    }
    if (dweight != nullptr) add_thread_partials(dweight, partials, 2 * C, C);
    if (dbias != nullptr) add_thread_partials(dbias, partials + C, 2 * C, C);
  }
}

// 1/sqrt(mean(x²) + eps) over a row of C.
static float rms_rstd(const float* x, int64_t C, float eps) {
  float sum_sq = 0.0f;
#pragma omp simd reduction(+ : sum_sq)
  for (int64_t c = 0; c < C; ++c) sum_sq += x[c] * x[c];
  return 1.0f / std::sqrt(sum_sq / C + eps);
}

// An RMSNorm row's input gradient for the gain gain(c) (offset + weight, or weight · silu(z)):
// d(rstd)/dx = -rstd³ · x / C, so dx += s · (g·gain - x · s² · mean(g·gain·x)).
template <typename Gain>
static void add_rmsnorm_dx(float* dx, const float* g, const float* x, float s, int64_t C,
                           Gain gain) {
  float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
  for (int64_t c = 0; c < C; ++c) dot += g[c] * gain(c) * x[c];
  const float k = s * s * dot / C;
  for (int64_t c = 0; c < C; ++c) dx[c] += (g[c] * gain(c) - x[c] * k) * s;
}

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N,
                     int64_t C, float eps, float gain_offset) {
#pragma omp parallel for schedule(static) if (worth_parallel(N * C))
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;  // (C)
    const float s = rms_rstd(x, C, eps);
    float* o = out + n * C;  // (C)
    // Hugging Face's order: LlamaRMSNorm's weight · (x · rstd), Qwen3NextRMSNorm's
    // (x · rstd) · (1 + weight); a gain offset of 0 adds nothing, so Llama's bits are kept.
    for (int64_t c = 0; c < C; ++c) o[c] = (gain_offset + weight[c]) * (x[c] * s);
    rstd[n] = s;
  }
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int64_t N, int64_t C,
                      float gain_offset) {
  float* partials = zeroed_thread_partials(C);  // per thread: dweight (C)
#pragma omp parallel if (worth_parallel(N * C))
  {
    float* dweight_t = partials + omp_get_thread_num() * C;
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const float* x = inp + n * C;   // (C)
      const float* g = dout + n * C;  // (C)
      const float s = rstd[n];
      if (dinp != nullptr)
        add_rmsnorm_dx(dinp + n * C, g, x, s, C,
                       [&](int64_t c) { return gain_offset + weight[c]; });
      for (int64_t c = 0; c < C; ++c) dweight_t[c] += g[c] * x[c] * s;
    }
    if (dweight != nullptr) add_thread_partials(dweight, partials, C, C);
  }
}

void gated_rmsnorm_forward(float* out, float* rstd, const float* inp, const float* gate,
                           const float* weight, int64_t N, int64_t C, float eps) {
#pragma omp parallel for schedule(static) if (worth_parallel(N * C))
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;   // (C)
    const float* z = gate + n * C;  // (C)
    const float s = rms_rstd(x, C, eps);
    float* o = out + n * C;  // (C)
    // Qwen3NextRMSNormGated's order: (weight · (x · rstd)) · silu(z).
    for (int64_t c = 0; c < C; ++c) o[c] = weight[c] * (x[c] * s) * (z[c] * sigmoid(z[c]));
    rstd[n] = s;
  }
}

void gated_rmsnorm_backward(float* dinp, float* dgate, float* dweight, const float* dout,
                            const float* inp, const float* gate, const float* weight,
                            const float* rstd, int64_t N, int64_t C) {
  float* partials = zeroed_thread_partials(C);  // per thread: dweight (C)
#pragma omp parallel if (worth_parallel(N * C))
  {
    float* dweight_t = partials + omp_get_thread_num() * C;
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const float* x = inp + n * C;   // (C)
      const float* z = gate + n * C;  // (C)
      const float* g = dout + n * C;  // (C)
      const float s = rstd[n];
      if (dinp != nullptr) {
        add_rmsnorm_dx(dinp + n * C, g, x, s, C,
                       [&](int64_t c) { return weight[c] * (z[c] * sigmoid(z[c])); });
      }
      if (dgate != nullptr) {
        float* dz = dgate + n * C;  // (C)
        // silu'(z) = σ(z) · (1 + z · (1 − σ(z)))
        for (int64_t c = 0; c < C; ++c) {
          const float sg = sigmoid(z[c]);
          dz[c] += g[c] * weight[c] * (x[c] * s) * sg * (1.0f + z[c] * (1.0f - sg));
        }
      }
      for (int64_t c = 0; c < C; ++c) dweight_t[c] += g[c] * (x[c] * s) * (z[c] * sigmoid(z[c]));
    }
    if (dweight != nullptr) add_thread_partials(dweight, partials, C, C);
  }
}

// FLA's l2norm_fwd: the epsilon inside the root, over the sum (not the mean) of squares.
constexpr float kL2NormEps = 1e-6f;

void l2norm_forward(float* out, float* rstd, const float* inp, int64_t N, int64_t heads, int64_t D,
                    int64_t ld) {
#pragma omp parallel for schedule(static) if (worth_parallel(N * heads * D))
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* x = inp + n * ld + h * D;  // (D)
      float sum_sq = 0.0f;
#pragma omp simd reduction(+ : sum_sq)
      for (int64_t i = 0; i < D; ++i) sum_sq += x[i] * x[i];
      const float s = 1.0f / std::sqrt(sum_sq + kL2NormEps);
      float* o = out + n * ld + h * D;  // (D), may be x
      for (int64_t i = 0; i < D; ++i) o[i] = x[i] * s;
      rstd[n * heads + h] = s;
    }
  }
}

void l2norm_backward(float* dinp, const float* dout, const float* out, const float* rstd,
                     int64_t N, int64_t heads, int64_t D, int64_t ld) {
  if (dinp == nullptr) return;
#pragma omp parallel for schedule(static) if (worth_parallel(N * heads * D))
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* y = out + n * ld + h * D;   // (D)
      const float* g = dout + n * ld + h * D;  // (D)
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t i = 0; i < D; ++i) dot += y[i] * g[i];
      const float s = rstd[n * heads + h];
      float* dx = dinp + n * ld + h * D;  // (D)
      for (int64_t i = 0; i < D; ++i) dx[i] += s * (g[i] - y[i] * dot);
    }
  }
}

}  // namespace tessel::cpu
