// The Mixture-of-Experts router's kernels (Megatron-LM's TopKRouter; kernels/cpu/router.cpp):
// E (experts) is small, so each token's row is one thread running the CPU's loop as it is, in the
// same order. The capacity drop ranks each assignment among its expert's by comparison.
#include "tessel/kernels/cuda/device.cuh"
#include "tessel/kernels/cuda/kernels.h"

namespace tessel::cuda {

namespace {

// Megatron adds this to sums it divides by (sigmoid scores), so an all-zero row stays finite.
constexpr float kNormEps = 1e-20f;

__device__ float row_max(const float* x, int64_t n) {
  float m = x[0];
  for (int64_t i = 1; i < n; ++i) m = fmaxf(m, x[i]);
  return m;
}

// softmax(x) into out (n); out may equal x.
__device__ void softmax_row(float* out, const float* x, int64_t n) {
  const float m = row_max(x, n);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    out[i] = expf(x[i] - m);
    sum += out[i];
  }
  for (int64_t i = 0; i < n; ++i) out[i] /= sum;
}

// Inserts (value, index) into the descending list of `count` entries, keeping at most k; equal
// values never pass one already there, so ties go to the lower expert index.
__device__ void offer(float* best_val, int32_t* best_idx, int64_t& count, int64_t k, float value,
                      int32_t index) {
  if (count == k && !(value > best_val[k - 1])) return;
  int64_t pos = count < k ? count : k - 1;
  while (pos > 0 && value > best_val[pos - 1]) {
    best_val[pos] = best_val[pos - 1];
    best_idx[pos] = best_idx[pos - 1];
    --pos;
  }
  best_val[pos] = value;
  best_idx[pos] = index;
  if (count < k) ++count;
}

__global__ void topk_forward_kernel(int32_t* experts, float* probs, const float* logits, int64_t N,
                                    int64_t E, int64_t k, RouterScore score, bool pre_softmax) {
  const bool full_softmax = score == RouterScore::Softmax && pre_softmax;
  TESSEL_GRID_LOOP(n, N) {
    const float* l = logits + n * E;
    float* p = probs + n * k;
    int32_t* idx = experts + n * k;
    float m = 0, sum = 1;
    if (full_softmax) {
      m = row_max(l, E);
      sum = 0;
      for (int64_t e = 0; e < E; ++e) sum += expf(l[e] - m);
    }
    int64_t count = 0;
    for (int64_t e = 0; e < E; ++e) {
      float s = l[e];
      if (full_softmax) s = expf(l[e] - m) / sum;
      if (score == RouterScore::Sigmoid) s = sigmoidf(l[e]);
      offer(p, idx, count, k, s, static_cast<int32_t>(e));
    }
    if (score == RouterScore::Softmax && !pre_softmax) {
      softmax_row(p, p, k);  // over the k selected logits
    } else if (score == RouterScore::Sigmoid && k > 1) {
      float total = 0;
      for (int64_t j = 0; j < k; ++j) total += p[j];
      for (int64_t j = 0; j < k; ++j) p[j] /= total + kNormEps;
    }
  }
}

__global__ void topk_backward_kernel(float* dlogits, const float* dprobs, const float* logits,
                                     const int32_t* experts, const float* probs, int64_t N,
                                     int64_t E, int64_t k, RouterScore score, bool pre_softmax) {
  TESSEL_GRID_LOOP(n, N) {
    const float* l = logits + n * E;
    const float* g = dprobs + n * k;
    const float* p = probs + n * k;
    const int32_t* idx = experts + n * k;
    float* dl = dlogits + n * E;
    float pg = 0;  // Σ_j p_j · g_j
    for (int64_t j = 0; j < k; ++j) pg += p[j] * g[j];
    if (score == RouterScore::Softmax && !pre_softmax) {
      for (int64_t j = 0; j < k; ++j) dl[idx[j]] += p[j] * (g[j] - pg);
    } else if (score == RouterScore::Softmax) {
      const float m = row_max(l, E);
      float sum = 0;
      for (int64_t e = 0; e < E; ++e) sum += expf(l[e] - m);
      for (int64_t e = 0; e < E; ++e) dl[e] -= expf(l[e] - m) / sum * pg;
      for (int64_t j = 0; j < k; ++j) dl[idx[j]] += p[j] * g[j];
    } else if (k == 1) {
      dl[idx[0]] += g[0] * p[0] * (1.0f - p[0]);  // p = sigmoid(l)
    } else {
      float total = kNormEps;
      for (int64_t j = 0; j < k; ++j) total += sigmoidf(l[idx[j]]);
      for (int64_t j = 0; j < k; ++j) {
        const float s = sigmoidf(l[idx[j]]);
        dl[idx[j]] += (g[j] - pg) / total * s * (1.0f - s);
      }
    }
  }
}

__global__ void aux_scores_kernel(float* scores, const float* logits, int64_t N, int64_t E,
                                  RouterScore score) {
  TESSEL_GRID_LOOP(n, N) {
    const float* l = logits + n * E;
    float* s = scores + n * E;
    if (score == RouterScore::Softmax) {
      softmax_row(s, l, E);
    } else {
      float total = 0;
      for (int64_t e = 0; e < E; ++e) {
        s[e] = sigmoidf(l[e]);
        total += s[e];
      }
      for (int64_t e = 0; e < E; ++e) s[e] /= total + kNormEps;
    }
  }
}

// Row n's Σ_e scores[n, e] · counts[e], in double, for the host's total.
__global__ void aux_loss_rows_kernel(double* rows, const float* scores, const float* counts,
                                     int64_t N, int64_t E) {
  TESSEL_GRID_LOOP(n, N) {
    double total = 0;
    for (int64_t e = 0; e < E; ++e) total += static_cast<double>(scores[n * E + e]) * counts[e];
    rows[n] = total;
  }
}

// c = grad_scale · coeff · E / (k · T²), in double as the CPU forms it.
__global__ void aux_loss_backward_kernel(float* dlogits, const float* logits, const float* scores,
                                         const float* counts, int64_t N, int64_t E, double c,
                                         RouterScore score) {
  TESSEL_GRID_LOOP(n, N) {
    const float* s = scores + n * E;
    float* dl = dlogits + n * E;
    float sg = 0;  // Σ_e s_e · g_e
    for (int64_t e = 0; e < E; ++e) sg += s[e] * static_cast<float>(c * counts[e]);
    if (score == RouterScore::Softmax) {
      for (int64_t e = 0; e < E; ++e) dl[e] += s[e] * (static_cast<float>(c * counts[e]) - sg);
    } else {
      const float* l = logits + n * E;
      float total = kNormEps;
      for (int64_t e = 0; e < E; ++e) total += sigmoidf(l[e]);
      for (int64_t e = 0; e < E; ++e) {
        const float sig = sigmoidf(l[e]);
        dl[e] += (static_cast<float>(c * counts[e]) - sg) / total * sig * (1.0f - sig);
      }
    }
  }
}

__global__ void z_loss_rows_kernel(double* rows, float* lse, const float* logits, int64_t N,
                                   int64_t E) {
  TESSEL_GRID_LOOP(n, N) {
    const float* l = logits + n * E;
    const float m = row_max(l, E);
    float sum = 0;
    for (int64_t e = 0; e < E; ++e) sum += expf(l[e] - m);
    lse[n] = m + logf(sum);
    rows[n] = static_cast<double>(lse[n]) * lse[n];
  }
}

__global__ void z_loss_backward_kernel(float* dlogits, const float* logits, const float* lse,
                                       int64_t N, int64_t E, float coeff, float grad_scale) {
  TESSEL_GRID_LOOP(n, N) {
    const float* l = logits + n * E;
    float* dl = dlogits + n * E;
    const float scale = grad_scale * coeff * 2.0f * lse[n] / static_cast<float>(N);
    for (int64_t e = 0; e < E; ++e) dl[e] += scale * expf(l[e] - lse[n]);
  }
}

// Assignment a is kept when fewer than `capacity` assignments to its expert rank above it: a
// higher prob, or an equal prob and a lower index (the CPU's stable sort). Assignments are
// compared a tile at a time from shared memory.
constexpr int kTile = 256;

__global__ void capacity_drop_kernel(int32_t* keep, unsigned long long* dropped,
                                     const int32_t* experts, const float* probs, int64_t A,
                                     int64_t capacity) {
  __shared__ int32_t tile_experts[kTile];
  __shared__ float tile_probs[kTile];
  const int64_t a = blockIdx.x * static_cast<int64_t>(kTile) + threadIdx.x;
  const int32_t e = a < A ? experts[a] : -1;
  const float p = a < A ? probs[a] : 0.0f;
  int64_t above = 0;
  for (int64_t start = 0; start < A; start += kTile) {
    const int64_t b = start + threadIdx.x;
    tile_experts[threadIdx.x] = b < A ? experts[b] : -2;  // -2 matches no assignment's expert
    tile_probs[threadIdx.x] = b < A ? probs[b] : 0.0f;
    __syncthreads();
    for (int j = 0; j < kTile; ++j) {
      const float q = tile_probs[j];
      above += tile_experts[j] == e && (q > p || (q == p && start + j < a));
    }
    __syncthreads();
  }
  if (a < A) {
    keep[a] = above < capacity ? 1 : 0;
    if (above >= capacity) atomicAdd(dropped, 1ull);
  }
}

CudaScratch loss_scratch, dropped_scratch;

}  // namespace

void moe_topk_forward(int32_t* experts, float* probs, const float* logits, int64_t N, int64_t E,
                      int64_t k, RouterScore score, bool pre_softmax) {
  launch_n("moe_topk_forward", topk_forward_kernel, N, experts, probs, logits, N, E, k, score,
           pre_softmax);
}

void moe_topk_backward(float* dlogits, const float* dprobs, const float* logits,
                       const int32_t* experts, const float* probs, int64_t N, int64_t E, int64_t k,
                       RouterScore score, bool pre_softmax) {
  launch_n("moe_topk_backward", topk_backward_kernel, N, dlogits, dprobs, logits, experts, probs, N,
           E, k, score, pre_softmax);
}

void moe_aux_scores_forward(float* scores, const float* logits, int64_t N, int64_t E,
                            RouterScore score) {
  launch_n("moe_aux_scores_forward", aux_scores_kernel, N, scores, logits, N, E, score);
}

double moe_aux_loss_forward(const float* scores, const float* counts, int64_t N, int64_t E,
                            int64_t k, int64_t T, float coeff) {
  if (T == 0) return 0.0;
  double* rows = loss_scratch.reserve<double>(N);
  launch_n("moe_aux_loss_forward", aux_loss_rows_kernel, N, rows, scores, counts, N, E);
  return sum_to_host(rows, N) * coeff * E / (static_cast<double>(k) * T * T);
}

void moe_aux_loss_backward(float* dlogits, const float* logits, const float* scores,
                           const float* counts, int64_t N, int64_t E, int64_t k, int64_t T,
                           float coeff, float grad_scale, RouterScore score) {
  const double c = static_cast<double>(grad_scale) * coeff * E / (static_cast<double>(k) * T * T);
  launch_n("moe_aux_loss_backward", aux_loss_backward_kernel, N, dlogits, logits, scores, counts, N,
           E, c, score);
}

double moe_z_loss_forward(float* lse, const float* logits, int64_t N, int64_t E, float coeff) {
  if (N == 0) return 0.0;
  double* rows = loss_scratch.reserve<double>(N);
  launch_n("moe_z_loss_forward", z_loss_rows_kernel, N, rows, lse, logits, N, E);
  return sum_to_host(rows, N) * coeff / N;
}

void moe_z_loss_backward(float* dlogits, const float* logits, const float* lse, int64_t N,
                         int64_t E, float coeff, float grad_scale) {
  launch_n("moe_z_loss_backward", z_loss_backward_kernel, N, dlogits, logits, lse, N, E, coeff,
           grad_scale);
}

int64_t moe_capacity_drop(int32_t* keep, const int32_t* experts, const float* probs, int64_t N,
                          int64_t E, int64_t k, int64_t capacity) {
  const int64_t A = N * k;
  if (A == 0) return 0;
  auto* dropped = dropped_scratch.reserve<unsigned long long>(1);
  cuda_memory().zero(dropped, sizeof(unsigned long long));
  launch("moe_capacity_drop", capacity_drop_kernel, static_cast<unsigned>((A + kTile - 1) / kTile),
         kTile, 0, keep, dropped, experts, probs, A, capacity);
  unsigned long long host = 0;
  cuda_memory().to_host(&host, dropped, sizeof(host));
  return static_cast<int64_t>(host);
}

}  // namespace tessel::cuda
