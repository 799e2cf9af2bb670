// Context parallelism's row movement: a rank's rows of whole sequences, K/V blocks packed for the
// ring, rank-major blocks to and from global positions, column blocks to and from ranks. One
// thread per element moved.
#include "tessel/kernels/cuda/device.cuh"
#include "tessel/kernels/cuda/kernels.h"

namespace tessel::cuda {

namespace {

__global__ void take_rows_kernel(int32_t* out, const int32_t* in, const int32_t* positions,
                                 int64_t B, int64_t T, int64_t T_l, int64_t width) {
  TESSEL_GRID_LOOP(i, B * T_l * width) {
    const int64_t j = i % width, t = i / width % T_l, b = i / (width * T_l);
    out[i] = in[(b * T + positions[t]) * width + j];
  }
}

__global__ void pack_kv_kernel(float* kv, const float* k, const float* v, int64_t N, int64_t width,
                               int64_t k_ld, int64_t v_ld) {
  TESSEL_GRID_LOOP(i, N * width) {
    const int64_t n = i / width, j = i % width;
    kv[i] = k[n * k_ld + j];
    kv[N * width + i] = v[n * v_ld + j];
  }
}

__global__ void unpack_add_kv_kernel(float* dk, float* dv, const float* kv_grad, int64_t N,
                                     int64_t width, int64_t k_ld, int64_t v_ld) {
  TESSEL_GRID_LOOP(i, N * width) {
    const int64_t n = i / width, j = i % width;
    dk[n * k_ld + j] += kv_grad[i];
    dv[n * v_ld + j] += kv_grad[N * width + i];
  }
}

// Element i of the rank blocks (CP, B, T_l, width), rank r's at r·rank_stride: its offset there
// (block) and in the global rows (B, T) of stride ld (global).
struct RankElement {
  int64_t block, global;
};
__device__ inline RankElement rank_element(int64_t i, const int32_t* positions, int64_t CP, int64_t B,
                                           int64_t T_l, int64_t ld, int64_t rank_stride, int64_t width) {
  const int64_t j = i % width, t = i / width % T_l, b = i / (width * T_l) % B, rank = i / (width * T_l * B);
  return {rank * rank_stride + (b * T_l + t) * width + j, (b * CP * T_l + positions[rank * T_l + t]) * ld + j};
}

__global__ void rows_to_global_kernel(float* out, int64_t ld, const float* blocks, int64_t rank_stride,
                                      const int32_t* positions, int64_t CP, int64_t B, int64_t T_l,
                                      int64_t width) {
  TESSEL_GRID_LOOP(i, CP * B * T_l * width) {
    const RankElement e = rank_element(i, positions, CP, B, T_l, ld, rank_stride, width);
    out[e.global] = blocks[e.block];
  }
}

__global__ void rows_from_global_kernel(float* blocks, int64_t rank_stride, const float* in, int64_t ld,
                                        const int32_t* positions, int64_t CP, int64_t B, int64_t T_l,
                                        int64_t width) {
  TESSEL_GRID_LOOP(i, CP * B * T_l * width) {
    const RankElement e = rank_element(i, positions, CP, B, T_l, ld, rank_stride, width);
    blocks[e.block] = in[e.global];
  }
}

// Element i of the rank blocks (CP, N, width): rank i / (N·width), row, column.
__global__ void columns_to_ranks_kernel(float* blocks, int64_t rank_stride, const float* in, int64_t ld,
                                        int64_t N, int64_t CP, int64_t width) {
  TESSEL_GRID_LOOP(i, CP * N * width) {
    const int64_t j = i % width, n = i / width % N, rank = i / (width * N);
    blocks[rank * rank_stride + n * width + j] = in[n * ld + rank * width + j];
  }
}

__global__ void columns_from_ranks_kernel(float* out, int64_t ld, const float* blocks, int64_t rank_stride,
                                          int64_t N, int64_t CP, int64_t width) {
  TESSEL_GRID_LOOP(i, CP * N * width) {
    const int64_t j = i % width, n = i / width % N, rank = i / (width * N);
    out[n * ld + rank * width + j] = blocks[rank * rank_stride + n * width + j];
  }
}

}  // namespace

void cp_take_rows(int32_t* out, const int32_t* in, const int32_t* positions, int64_t B, int64_t T,
                  int64_t T_l, int64_t width) {
  launch_n("cp_take_rows", take_rows_kernel, B * T_l * width, out, in, positions, B, T, T_l, width);
}

void cp_pack_kv(float* kv, const float* k, const float* v, int64_t N, int64_t width, int64_t k_ld,
                int64_t v_ld) {
  launch_n("cp_pack_kv", pack_kv_kernel, N * width, kv, k, v, N, width, k_ld, v_ld);
}

void cp_unpack_add_kv(float* dk, float* dv, const float* kv_grad, int64_t N, int64_t width,
                      int64_t k_ld, int64_t v_ld) {
  launch_n("cp_unpack_add_kv", unpack_add_kv_kernel, N * width, dk, dv, kv_grad, N, width, k_ld,
           v_ld);
}

void cp_rows_to_global(float* out, int64_t ld, const float* blocks, int64_t rank_stride,
                       const int32_t* positions, int64_t CP, int64_t B, int64_t T_l, int64_t width) {
  launch_n("cp_rows_to_global", rows_to_global_kernel, CP * B * T_l * width, out, ld, blocks, rank_stride,
           positions, CP, B, T_l, width);
}

void cp_rows_from_global(float* blocks, int64_t rank_stride, const float* in, int64_t ld,
                         const int32_t* positions, int64_t CP, int64_t B, int64_t T_l, int64_t width) {
  launch_n("cp_rows_from_global", rows_from_global_kernel, CP * B * T_l * width, blocks, rank_stride, in, ld,
           positions, CP, B, T_l, width);
}

void cp_columns_to_ranks(float* blocks, int64_t rank_stride, const float* in, int64_t ld, int64_t N,
                         int64_t CP, int64_t width) {
  launch_n("cp_columns_to_ranks", columns_to_ranks_kernel, CP * N * width, blocks, rank_stride, in, ld, N, CP,
           width);
}

void cp_columns_from_ranks(float* out, int64_t ld, const float* blocks, int64_t rank_stride, int64_t N,
                           int64_t CP, int64_t width) {
  launch_n("cp_columns_from_ranks", columns_from_ranks_kernel, CP * N * width, out, ld, blocks, rank_stride, N,
           CP, width);
}

}  // namespace tessel::cuda
