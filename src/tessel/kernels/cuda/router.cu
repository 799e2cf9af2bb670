// The Mixture-of-Experts router's kernels (Megatron-LM's TopKRouter): one thread per token's row
// running the CPU's row math (kernels/router_rows.h) as it is. The capacity drop ranks each
// assignment among its expert's by comparison instead of the CPU's sort.
#include "tessel/kernels/cuda/device.cuh"
#include "tessel/kernels/cuda/kernels.h"
#include "tessel/kernels/router_rows.h"

namespace tessel::cuda {

namespace {

__global__ void topk_forward_kernel(int32_t* experts, float* probs, const float* logits, int64_t N,
                                    int64_t E, int64_t k, RouterScore score, bool pre_softmax) {
  TESSEL_GRID_LOOP(n, N) {
    router_rows::topk_forward(experts + n * k, probs + n * k, logits + n * E, E, k, score,
                              pre_softmax);
  }
}

__global__ void topk_backward_kernel(float* dlogits, const float* dprobs, const float* logits,
                                     const int32_t* experts, const float* probs, int64_t N,
                                     int64_t E, int64_t k, RouterScore score, bool pre_softmax) {
  TESSEL_GRID_LOOP(n, N) {
    router_rows::topk_backward(dlogits + n * E, dprobs + n * k, logits + n * E, experts + n * k,
                               probs + n * k, E, k, score, pre_softmax);
  }
}

__global__ void aux_scores_kernel(float* scores, const float* logits, int64_t N, int64_t E,
                                  RouterScore score) {
  TESSEL_GRID_LOOP(n, N) router_rows::aux_scores(scores + n * E, logits + n * E, E, score);
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

__global__ void aux_loss_backward_kernel(float* dlogits, const float* logits, const float* scores,
                                         const float* counts, int64_t N, int64_t E, double c,
                                         RouterScore score) {
  TESSEL_GRID_LOOP(n, N) {
    router_rows::aux_loss_backward(dlogits + n * E, logits + n * E, scores + n * E, counts, E, c,
                                   score);
  }
}

__global__ void z_loss_rows_kernel(double* rows, float* lse, const float* logits, int64_t N,
                                   int64_t E) {
  TESSEL_GRID_LOOP(n, N) {
    lse[n] = router_rows::log_sum_exp(logits + n * E, E);
    rows[n] = static_cast<double>(lse[n]) * lse[n];
  }
}

__global__ void z_loss_backward_kernel(float* dlogits, const float* logits, const float* lse,
                                       int64_t N, int64_t E, float coeff, float grad_scale) {
  TESSEL_GRID_LOOP(n, N) {
    const float scale = grad_scale * coeff * 2.0f * lse[n] / static_cast<float>(N);
    router_rows::z_loss_backward(dlogits + n * E, logits + n * E, lse[n], E, scale);
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

// One thread per logit (n, e).
__global__ void random_logits_kernel(float* logits, const int32_t* samples, const int32_t* positions, int64_t N,
                                     int64_t E, uint64_t seed, uint32_t site) {
  TESSEL_GRID_LOOP(i, N * E) {
    const int64_t n = i / E;
    logits[i] = router_rows::random_logit(seed, site, samples[n], positions[n], i % E);
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

void moe_random_logits(float* logits, const int32_t* samples, const int32_t* positions, int64_t N, int64_t E,
                       uint64_t seed, uint32_t site) {
  launch_n("moe_random_logits", random_logits_kernel, N * E, logits, samples, positions, N, E, seed, site);
}

}  // namespace tessel::cuda
