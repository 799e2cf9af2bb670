// Helpers shared by the CUDA kernels: launch shapes, grid-stride loops, warp and block reductions.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "tessel/core/cuda.h"

namespace tessel::cuda {

constexpr int kThreads = 256;  // threads per block of the element-wise kernels
constexpr int kWarp = 32;

// Blocks for n independent items at `threads` per block. Grid-stride loops cover the rest, so
// the grid is capped (it only needs to fill the device several times over).
inline unsigned grid_for(int64_t n, int threads = kThreads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, int64_t{1} << 16));
}

// kernel<<<grid, threads, shared_bytes, cuda_stream()>>>(args...), its launch error named `name`.
template <typename... Params, typename... Args>
void launch(const char* name, void (*kernel)(Params...), dim3 grid, int threads,
            size_t shared_bytes, Args... args) {
  kernel<<<grid, threads, shared_bytes, cuda_stream()>>>(args...);
  cuda_check_launch(name);
}

// The same over n independent items (grid_for(n) blocks of kThreads); nothing when n is 0.
template <typename... Params, typename... Args>
void launch_n(const char* name, void (*kernel)(Params...), int64_t n, Args... args) {
  if (n > 0) launch(name, kernel, grid_for(n), kThreads, 0, args...);
}

// for (i = this thread's first item; i < n; i += all threads of the grid)
#define TESSEL_GRID_LOOP(i, n)                                                           \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// Row kernels: one warp per row, kWarpsPerBlock rows per block.
constexpr int kWarpsPerBlock = kThreads / kWarp;
inline unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
}
__device__ inline int64_t warp_row() {
  return blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / kWarp;
}
__device__ inline int lane_id() { return threadIdx.x % kWarp; }

// The same launch with one warp per row over `rows` rows; nothing when rows is 0.
template <typename... Params, typename... Args>
void launch_rows(const char* name, void (*kernel)(Params...), int64_t rows, Args... args) {
  if (rows > 0) launch(name, kernel, row_blocks(rows), kThreads, 0, args...);
}

__device__ inline float warp_sum(float x) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

__device__ inline double warp_sum(double x) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

__device__ inline float warp_max(float x) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

// The sum over a whole block (blockDim.x a multiple of 32, at most 1024), returned to every
// thread. `shared` holds 32 values; the block must reach this call together.
template <typename T>
__device__ inline T block_sum(T x, T* shared) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  x = warp_sum(x);
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  const int warps = blockDim.x / kWarp;
  x = lane < warps ? shared[lane] : T(0);
  return warp_sum(x);
}

__device__ inline float block_max(float x, float* shared) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  x = warp_max(x);
  __syncthreads();
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  const int warps = blockDim.x / kWarp;
  x = lane < warps ? shared[lane] : -INFINITY;
  return warp_max(x);
}

__device__ inline float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

// The sum of n doubles in device memory, on the host: a fixed reduction tree, so the same values
// give the same bits on every run (elementwise.cu). Waits for the stream.
double sum_to_host(const double* values, int64_t n);

// Per-column sums over rows, in a fixed order: dst[c] += Σ_n value(n, c) for n < N, c < C.
// Rows are cut into chunks of kColumnChunk; each chunk's sum goes to scratch, and the chunks are
// then added in order. `Value` is a device functor `float operator()(int64_t n, int64_t c)`.
constexpr int64_t kColumnChunk = 256;

template <typename Value>
__global__ void column_chunk_sums(float* partial, Value value, int64_t N, int64_t C) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  const int64_t begin = blockIdx.y * kColumnChunk, end = min(N, begin + kColumnChunk);
  float sum = 0.0f;
  for (int64_t n = begin; n < end; ++n) sum += value(n, c);
  partial[blockIdx.y * C + c] = sum;
}

// dst[c] += Σ_chunk partial[chunk·C + c], chunks in order (elementwise.cu).
void add_column_chunks(float* dst, const float* partial, int64_t chunks, int64_t C);

// The plain column sum: value(n, c) = x[n·C + c] (a bias gradient).
struct RowValue {
  const float* x;
  int64_t C;
  __device__ float operator()(int64_t n, int64_t c) const { return x[n * C + c]; }
};

template <typename Value>
void column_sums(float* dst, Value value, int64_t N, int64_t C, CudaScratch& scratch) {
  if (dst == nullptr || N == 0 || C == 0) return;
  const int64_t chunks = (N + kColumnChunk - 1) / kColumnChunk;
  float* partial = scratch.reserve<float>(chunks * C);
  const dim3 grid(static_cast<unsigned>((C + kThreads - 1) / kThreads),
                  static_cast<unsigned>(chunks));
  launch("column_chunk_sums", column_chunk_sums<Value>, grid, kThreads, 0, partial, value, N, C);
  add_column_chunks(dst, partial, chunks, C);
}

}  // namespace tessel::cuda
