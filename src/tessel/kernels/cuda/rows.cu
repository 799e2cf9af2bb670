// Context parallelism's row movement: a rank's rows of whole sequences, K/V blocks packed for the
// ring, and the all-gather path's reorder between rank-major blocks and global positions. One
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

// Element i of the rank-major blocks (CP, 2, B, T_l, width) and its place in global position
// order (2, B, T, width), rank r's rows at positions[r·T_l + t].
__device__ inline int64_t global_index(int64_t i, const int32_t* positions, int64_t B, int64_t T_l,
                                       int64_t width, int64_t T) {
  const int64_t j = i % width, t = i / width % T_l, b = i / (width * T_l) % B;
  const int64_t part = i / (width * T_l * B) % 2, rank = i / (width * T_l * B * 2);
  return ((part * B + b) * T + positions[rank * T_l + t]) * width + j;
}

__global__ void kv_to_global_kernel(float* global, const float* rank_major,
                                    const int32_t* positions, int64_t CP, int64_t B, int64_t T_l,
                                    int64_t width) {
  TESSEL_GRID_LOOP(i, CP * 2 * B * T_l * width) {
    global[global_index(i, positions, B, T_l, width, CP * T_l)] = rank_major[i];
  }
}

__global__ void kv_from_global_kernel(float* rank_major, const float* global,
                                      const int32_t* positions, int64_t CP, int64_t B, int64_t T_l,
                                      int64_t width) {
  TESSEL_GRID_LOOP(i, CP * 2 * B * T_l * width) {
    rank_major[i] = global[global_index(i, positions, B, T_l, width, CP * T_l)];
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

void cp_kv_to_global(float* global, const float* rank_major, const int32_t* positions, int64_t CP,
                     int64_t B, int64_t T_l, int64_t width) {
  launch_n("cp_kv_to_global", kv_to_global_kernel, CP * 2 * B * T_l * width, global, rank_major,
           positions, CP, B, T_l, width);
}

void cp_kv_from_global(float* rank_major, const float* global, const int32_t* positions, int64_t CP,
                       int64_t B, int64_t T_l, int64_t width) {
  launch_n("cp_kv_from_global", kv_from_global_kernel, CP * 2 * B * T_l * width, rank_major, global,
           positions, CP, B, T_l, width);
}

}  // namespace tessel::cuda
