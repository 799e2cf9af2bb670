// The Mixture-of-Experts token movement around the experts: counting and slotting the routed
// assignments, the permutation into dispatch order and the weighted combination back. Sums over a
// token's k choices run in choice order, as on the CPU; nothing here uses float atomics.
#include "tessel/kernels/cuda/device.cuh"
#include "tessel/kernels/cuda/kernels.h"

namespace tessel::cuda {

namespace {

constexpr int kScanThreads = 1024;

// Whole numbers below 2^24 add exactly in float, in any order: the counts are deterministic.
__global__ void count_kernel(float* counts, const int32_t* experts, const int32_t* keep,
                             int64_t n) {
  TESSEL_GRID_LOOP(a, n) {
    if (keep == nullptr || keep[a] != 0) atomicAdd(counts + experts[a], 1.0f);
  }
}

// The CPU's sequential slot_row[a] = cursor[experts[a]]++ (kept assignments only) in one block,
// a chunk of assignments at a time: within a chunk each kept assignment counts the kept ones to
// its expert before it, and the last of them moves the expert's cursor on. (The number of experts
// is not an argument, so no per-expert grid.)
__global__ void assign_slots_kernel(int32_t* slot_row, int32_t* cursor, const int32_t* experts,
                                    const int32_t* keep, int64_t n) {
  __shared__ int32_t chunk_experts[kScanThreads];
  const int t = threadIdx.x;
  for (int64_t start = 0; start < n; start += blockDim.x) {
    const int64_t a = start + t;
    const int32_t e = a < n && keep[a] != 0 ? experts[a] : -1;  // -1: dropped or past the end
    chunk_experts[t] = e;
    __syncthreads();
    int32_t before = 0;
    bool last = true;
    if (e >= 0) {
      for (int j = 0; j < t; ++j) before += chunk_experts[j] == e;
      for (int j = t + 1; j < static_cast<int>(blockDim.x) && last; ++j)
        last = chunk_experts[j] != e;
    }
    const int32_t slot = e >= 0 ? cursor[e] + before : -1;
    __syncthreads();  // every cursor is read before any moves on
    if (a < n) slot_row[a] = slot;
    if (e >= 0 && last) cursor[e] += before + 1;
    __syncthreads();  // the moved cursors are seen by the next chunk; chunk_experts is rewritten
  }
}

__global__ void permute_forward_kernel(float* send, const float* x, const int32_t* slot_row,
                                       int64_t n, int64_t k, int64_t C) {
  TESSEL_GRID_LOOP(i, n * C) {
    const int64_t a = i / C, c = i % C;
    if (slot_row[a] >= 0) send[slot_row[a] * C + c] = x[a / k * C + c];
  }
}

__global__ void permute_backward_kernel(float* dx, const float* d_send, const int32_t* slot_row,
                                        int64_t N, int64_t k, int64_t C) {
  TESSEL_GRID_LOOP(i, N * C) {
    const int64_t n = i / C, c = i % C;
    float sum = dx[i];
    for (int64_t j = 0; j < k; ++j) {
      const int32_t row = slot_row[n * k + j];
      if (row >= 0) sum += d_send[row * C + c];
    }
    dx[i] = sum;
  }
}

__global__ void unpermute_forward_kernel(float* out, const float* combined, const float* probs,
                                         const int32_t* slot_row, int64_t N, int64_t k, int64_t C) {
  TESSEL_GRID_LOOP(i, N * C) {
    const int64_t n = i / C, c = i % C;
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      const int32_t row = slot_row[n * k + j];
      if (row >= 0) sum += probs[n * k + j] * combined[row * C + c];
    }
    out[i] = sum;
  }
}

// d_probs: one warp per assignment, the dot product of dout's row with its combined row.
__global__ void unpermute_dprobs_kernel(float* d_probs, const float* dout, const float* combined,
                                        const int32_t* slot_row, int64_t n, int64_t k, int64_t C) {
  const int64_t a = warp_row();
  if (a >= n) return;
  const int32_t row = slot_row[a];
  float dot = 0.0f;
  if (row >= 0) {
    for (int64_t c = lane_id(); c < C; c += kWarp)
      dot += dout[a / k * C + c] * combined[row * C + c];
  }
  dot = warp_sum(dot);
  if (lane_id() == 0) d_probs[a] = dot;
}

__global__ void unpermute_dcombined_kernel(float* d_combined, const float* dout, const float* probs,
                                           const int32_t* slot_row, int64_t n, int64_t k,
                                           int64_t C) {
  TESSEL_GRID_LOOP(i, n * C) {
    const int64_t a = i / C, c = i % C;
    if (slot_row[a] >= 0) d_combined[slot_row[a] * C + c] = probs[a] * dout[a / k * C + c];
  }
}

// Expert indices travel as floats, exact below 2^24.
__global__ void pack_choices_kernel(float* choices, const int32_t* experts, const float* probs,
                                    int64_t n) {
  TESSEL_GRID_LOOP(a, n) {
    choices[a] = static_cast<float>(experts[a]);
    choices[n + a] = probs[a];
  }
}

__global__ void unpack_choices_kernel(int32_t* experts, float* probs, const float* choices,
                                      int64_t G, int64_t n) {
  TESSEL_GRID_LOOP(i, G * n) {
    const int64_t r = i / n, a = i % n;
    experts[i] = static_cast<int32_t>(choices[2 * n * r + a]);
    probs[i] = choices[2 * n * r + n + a];
  }
}

}  // namespace

void moe_count_assignments(float* counts, const int32_t* experts, const int32_t* keep, int64_t n,
                           int64_t E) {
  cuda_memory().zero(counts, E * sizeof(float));
  launch_n("moe_count_assignments", count_kernel, n, counts, experts, keep, n);
}

void moe_assign_slots(int32_t* slot_row, int32_t* cursor, const int32_t* experts,
                      const int32_t* keep, int64_t n) {
  if (n == 0) return;
  launch("moe_assign_slots", assign_slots_kernel, 1, kScanThreads, 0, slot_row, cursor, experts,
         keep, n);
}

void moe_permute_forward(float* send, const float* x, const int32_t* slot_row, int64_t N, int64_t k,
                         int64_t C) {
  launch_n("moe_permute_forward", permute_forward_kernel, N * k * C, send, x, slot_row, N * k, k,
           C);
}

void moe_permute_backward(float* dx, const float* d_send, const int32_t* slot_row, int64_t N,
                          int64_t k, int64_t C) {
  launch_n("moe_permute_backward", permute_backward_kernel, N * C, dx, d_send, slot_row, N, k, C);
}

void moe_unpermute_forward(float* out, const float* combined, const float* probs,
                           const int32_t* slot_row, int64_t N, int64_t k, int64_t C) {
  launch_n("moe_unpermute_forward", unpermute_forward_kernel, N * C, out, combined, probs, slot_row,
           N, k, C);
}

void moe_unpermute_backward(float* d_probs, float* d_combined, const float* dout,
                            const float* combined, const float* probs, const int32_t* slot_row,
                            int64_t N, int64_t k, int64_t C) {
  launch_rows("moe_unpermute_backward", unpermute_dprobs_kernel, N * k, d_probs, dout, combined,
              slot_row, N * k, k, C);
  launch_n("moe_unpermute_backward", unpermute_dcombined_kernel, N * k * C, d_combined, dout, probs,
           slot_row, N * k, k, C);
}

void moe_pack_choices(float* choices, const int32_t* experts, const float* probs, int64_t n) {
  launch_n("moe_pack_choices", pack_choices_kernel, n, choices, experts, probs, n);
}

void moe_unpack_choices(int32_t* experts, float* probs, const float* choices, int64_t G,
                        int64_t n) {
  launch_n("moe_unpack_choices", unpack_choices_kernel, G * n, experts, probs, choices, G, n);
}

}  // namespace tessel::cuda
