// Token (+ learned position) embeddings: a row gather forward, a row scatter-add backward.
#include "tessel/kernels/cuda/device.cuh"
#include "tessel/kernels/cuda/kernels.h"

namespace tessel::cuda {

namespace {

__global__ void embedding_forward_kernel(float* out, const int32_t* tokens,
                                         const int32_t* positions, const float* wte,
                                         const float* wpe, int64_t N, int64_t C) {
  TESSEL_GRID_LOOP(i, N * C) {
    const int64_t n = i / C, c = i % C;
    const int32_t token = tokens[n];
    if (token < 0) {  // another tensor-parallel rank's part of the vocabulary
      out[i] = 0.0f;
      continue;
    }
    float value = wte[token * C + c];
    if (wpe != nullptr) value += wpe[positions[n] * C + c];
    out[i] = value;
  }
}

// Rows repeat (the same token twice in a batch), so the additions into one row race: atomics.
// Their order, and so the last bits of a row that several tokens add to, varies from run to run
// (as torch's CUDA embedding backward); every other gradient of the backend is deterministic.
__global__ void scatter_add_rows_kernel(float* table, const float* dout, const int32_t* index,
                                        int64_t N, int64_t C) {
  TESSEL_GRID_LOOP(i, N * C) {
    const int64_t n = i / C, c = i % C;
    if (index[n] >= 0) atomicAdd(table + index[n] * C + c, dout[i]);
  }
}

__global__ void shard_ids_kernel(int32_t* local, const int32_t* tokens, int64_t N,
                                 int64_t vocab_start, int64_t V_valid) {
  TESSEL_GRID_LOOP(n, N) {
    const int64_t id = tokens[n] - vocab_start;
    local[n] = id >= 0 && id < V_valid ? static_cast<int32_t>(id) : -1;
  }
}

}  // namespace

void embedding_forward(float* out, const int32_t* tokens, const int32_t* positions,
                       const float* wte, const float* wpe, int64_t N, int64_t C) {
  launch_n("embedding_forward", embedding_forward_kernel, N * C, out, tokens, positions, wte, wpe,
           N, C);
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        const int32_t* positions, int64_t N, int64_t C) {
  if (dwte != nullptr)
    launch_n("embedding_backward", scatter_add_rows_kernel, N * C, dwte, dout, tokens, N, C);
  if (dwpe != nullptr)
    launch_n("embedding_backward", scatter_add_rows_kernel, N * C, dwpe, dout, positions, N, C);
}

void embedding_shard_ids(int32_t* local, const int32_t* tokens, int64_t N, int64_t vocab_start,
                         int64_t V_valid) {
  launch_n("embedding_shard_ids", shard_ids_kernel, N, local, tokens, N, vocab_start, V_valid);
}

}  // namespace tessel::cuda
