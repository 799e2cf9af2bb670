// What the attention kernels share (attention.cu, attention_backward.cu): which keys a query row
// sees, the tiles staged in shared memory and the argument checks.
//
// The straightforward flash-style version, fp32 on the CUDA cores: one warp per row, keys (or,
// in the dK/dV pass, queries) staged 32 at a time in shared memory, each lane owning one of them
// for the dot products and D/32 output columns for the accumulation, softmax online. No score
// matrix is ever stored. Tensor-core versions (wgmma on sm_90, or cuDNN's fused attention) replace
// it where a measurement on the GPU says they are faster; this one is the reference they are
// checked against.
#pragma once

#include "tessel/kernels/cuda/device.cuh"
#include "tessel/kernels/dropout.h"

namespace tessel::cuda {

constexpr int kTileRows = 32;     // keys (or queries) staged per step: one per lane
constexpr int kMaxHeadDim = 256;  // accumulators per lane: kMaxHeadDim / 32
constexpr int kColumnsPerLane = kMaxHeadDim / kWarp;
constexpr int kRowsPerBlock = kWarpsPerBlock;  // one warp per query (or key) row

// Key s is visible to query t of batch item b: by global positions (the block interface), by
// index (causal), or always. Packed documents (key_start, (B, Tq), block interface only): the row
// also sees no key before its document's first position.
struct Visibility {
  const int32_t* q_pos = nullptr;
  const int32_t* k_pos = nullptr;
  bool causal = false;
  const int32_t* key_start = nullptr;
  int64_t Tq = 0;  // key_start's row length

  __device__ bool operator()(int64_t b, int64_t t, int64_t s) const {
    if (q_pos != nullptr)
      return k_pos[s] <= q_pos[t] && (key_start == nullptr || k_pos[s] >= key_start[b * Tq + t]);
    return !causal || s <= t;
  }
  __host__ __device__ bool by_index() const { return q_pos == nullptr && causal; }
};

// Rows [first, first + count) of a (rows, D) matrix with row stride ld into shared memory with
// row stride dst_ld; rows past `rows` become zeros. Tiles (count kTileRows) are padded to
// dst_ld = D + 1, which puts lane l's row in bank l; a block's own rows (kRowsPerBlock, one per
// warp, read by broadcast) are not.
__device__ inline void stage_rows(float* dst, int64_t dst_ld, int64_t count, const float* src,
                                  int64_t ld, int64_t first, int64_t rows, int64_t D) {
  for (int64_t i = threadIdx.x; i < count * D; i += blockDim.x) {
    const int64_t r = i / D, d = i % D;
    dst[r * dst_ld + d] = first + r < rows ? src[(first + r) * ld + d] : 0.0f;
  }
}
__device__ inline void stage_tile(float* tile, const float* src, int64_t ld, int64_t first,
                                  int64_t rows, int64_t D) {
  stage_rows(tile, D + 1, kTileRows, src, ld, first, rows, D);
}
__device__ inline void stage_block_rows(float* dst, const float* src, int64_t ld, int64_t first,
                                        int64_t rows, int64_t D) {
  stage_rows(dst, D, kRowsPerBlock, src, ld, first, rows, D);
}

// Σ_d a[d] · b[d] over one staged row and a row of this warp's own (both in shared memory).
__device__ inline float dot_row(const float* a, const float* b, int64_t D) {
  float sum = 0.0f;
  for (int64_t d = 0; d < D; ++d) sum += a[d] * b[d];
  return sum;
}

// acc[j] += Σ_i weight_i · tile[i][lane + 32·j] over the tile's rows, weight_i held by lane i.
__device__ inline void accumulate_rows(float (&acc)[kColumnsPerLane], float weight,
                                       const float* tile, int64_t D) {
  const int lane = threadIdx.x % kWarp;
  for (int i = 0; i < kTileRows; ++i) {
    const float w = __shfl_sync(0xffffffffu, weight, i);
    if (w == 0.0f) continue;  // the same for every lane: no divergence
#pragma unroll
    for (int j = 0; j < kColumnsPerLane; ++j) {
      const int64_t d = lane + j * kWarp;
      if (d < D) acc[j] += w * tile[i * (D + 1) + d];
    }
  }
}

// Attention-probability dropout is built for the CPU only: an active one stops here (training
// refuses it on CUDA up front, train/plan.cpp; hidden dropout runs on CUDA).
inline void refuse_dropout(const char* which, const DropoutSite& dropout) {
  if (dropout.active()) cuda_fail(which, "attention dropout is not built for CUDA; give --attention-dropout 0");
}

// Shapes the kernels cannot run throw, naming the call (the CPU reference's checks, and the
// head-size limit of these kernels).
void check_attention_args(const char* which, int64_t B, int64_t Tq, int64_t Tk, int64_t H,
                          int64_t G, int64_t D, int64_t q_ld, int64_t k_ld, int64_t v_ld);

// The block interface's visibility (global positions, packed documents' key_start) once its
// arguments passed check_attention_args and the positions are given.
Visibility block_visibility(const char* which, int64_t B, int64_t Tq, int64_t Tk, int64_t H,
                            int64_t G, int64_t D, int64_t q_ld, int64_t k_ld, int64_t v_ld,
                            const int32_t* q_pos, const int32_t* k_pos, const int32_t* key_start);

// Dynamic shared memory above the default 48 KiB needs the kernel's limit raised first.
void allow_shared_bytes(const void* kernel, size_t bytes);

}  // namespace tessel::cuda
