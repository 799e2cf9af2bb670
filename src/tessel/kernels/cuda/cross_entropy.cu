// Softmax cross-entropy over the (possibly vocabulary-parallel) logits, one block per row: the
// row (V ≈ 50k floats) is read twice, max then exp-sum, as on the CPU.
#include "tessel/kernels/cuda/device.cuh"
#include "tessel/kernels/cuda/kernels.h"

namespace tessel::cuda {

namespace {

constexpr int kRowThreads = 512;

__global__ void partial_forward_kernel(float* row_max, float* row_sumexp, float* target_logit,
                                       const float* logits, const int32_t* targets,
                                       int64_t vocab_start, int64_t V, int64_t V_valid) {
  __shared__ float shared[kWarp];
  const int64_t n = blockIdx.x;
  const float* x = logits + n * V;  // (V)
  float max = -INFINITY;
  for (int64_t v = threadIdx.x; v < V_valid; v += blockDim.x) max = fmaxf(max, x[v]);
  max = block_max(max, shared);
  // Subtracting the max keeps every exp in (0, 1]: no overflow, and the largest term is exact.
  float sum = 0.0f;
  for (int64_t v = threadIdx.x; v < V_valid; v += blockDim.x) sum += expf(x[v] - max);
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) {
    row_max[n] = max;
    row_sumexp[n] = sum;
    const int64_t t = targets[n] - vocab_start;
    target_logit[n] = t >= 0 && t < V_valid ? x[t] : 0.0f;
  }
}

// Each element is read, then written, by the same thread: dlogits may be logits itself.
__global__ void backward_kernel(float* dlogits, const float* logits, const float* lse,
                                const int32_t* targets, int64_t vocab_start, float grad_scale,
                                int64_t V, int64_t V_valid) {
  const int64_t n = blockIdx.x;
  const float* x = logits + n * V;  // (V)
  float* d = dlogits + n * V;       // (V)
  const float l = lse[n];
  const bool ignored = targets[n] < 0;  // left out of the loss: no gradient
  const int64_t t = targets[n] - vocab_start;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
    float value = 0.0f;  // padding columns
    if (v < V_valid && !ignored) {
      value = expf(x[v] - l) * grad_scale;
      if (v == t) value -= grad_scale;
    }
    d[v] = value;
  }
}

__global__ void rescale_kernel(float* row_sumexp, const float* row_max, const float* global_max,
                               int64_t N) {
  TESSEL_GRID_LOOP(n, N) row_sumexp[n] *= expf(row_max[n] - global_max[n]);
}

// The row's loss as the CPU forms it: lse in float, lse − target in float, summed in double; a
// row whose target is ignored (-1) adds 0.
__global__ void finish_kernel(double* loss, float* lse, const float* global_max,
                              const float* row_sumexp, const float* target_logit,
                              const int32_t* targets, int64_t N) {
  TESSEL_GRID_LOOP(n, N) {
    lse[n] = global_max[n] + logf(row_sumexp[n]);
    loss[n] = targets[n] >= 0 ? lse[n] - target_logit[n] : 0.0f;
  }
}

CudaScratch loss_scratch;

}  // namespace

void cross_entropy_partial_forward(float* row_max, float* row_sumexp, float* target_logit,
                                   const float* logits, const int32_t* targets, int64_t vocab_start,
                                   int64_t N, int64_t V, int64_t V_valid) {
  if (N == 0) return;
  launch("cross_entropy_partial_forward", partial_forward_kernel, static_cast<unsigned>(N),
         kRowThreads, 0, row_max, row_sumexp, target_logit, logits, targets, vocab_start, V,
         V_valid);
}

void cross_entropy_rescale(float* row_sumexp, const float* row_max, const float* global_max,
                           int64_t N) {
  launch_n("cross_entropy_rescale", rescale_kernel, N, row_sumexp, row_max, global_max, N);
}

double cross_entropy_finish(float* lse, const float* global_max, const float* row_sumexp,
                            const float* target_logit, const int32_t* targets, int64_t N) {
  if (N == 0) return 0.0;
  double* loss = loss_scratch.reserve<double>(N);
  launch_n("cross_entropy_finish", finish_kernel, N, loss, lse, global_max, row_sumexp,
           target_logit, targets, N);
  return sum_to_host(loss, N);
}

void cross_entropy_backward(float* dlogits, const float* logits, const float* lse,
                            const int32_t* targets, int64_t vocab_start, float grad_scale,
                            int64_t N, int64_t V, int64_t V_valid) {
  if (N == 0) return;
  launch("cross_entropy_backward", backward_kernel, static_cast<unsigned>(N), kRowThreads, 0,
         dlogits, logits, lse, targets, vocab_start, grad_scale, V, V_valid);
}

}  // namespace tessel::cuda
