// Elementwise kernels and reductions over flat buffers. The reductions are deterministic: a fixed
// grid, each thread's elements fixed by its index, and fixed trees above it.
#include "tessel/kernels/cuda/device.cuh"
#include "tessel/kernels/cuda/kernels.h"

namespace tessel::cuda {

namespace {

// Blocks of the first reduction stage: enough to fill an H200 (132 multiprocessors) several
// times; fixed, so that the result does not depend on the device.
constexpr int64_t kReduceBlocks = 1024;
constexpr int kReduceThreads = 1024;

__global__ void scale_kernel(float* x, float factor, int64_t n) {
  TESSEL_GRID_LOOP(i, n) x[i] *= factor;
}

__global__ void residual_kernel(float* out, const float* a, const float* b, int64_t n) {
  TESSEL_GRID_LOOP(i, n) out[i] = a[i] + b[i];
}

// One thread per element; the mask is kernels/dropout.h's function of the element's coordinates,
// the same bits the CPU reference draws.
__global__ void dropout_add_kernel(float* out, const float* a, const float* b, int64_t R, int64_t C,
                                   DropoutSite site) {
  const bool active = site.active();
  TESSEL_GRID_LOOP(i, R * C) {
    const float kept = b[i] * (active ? dropout_factor(site, i / C, i % C) : 1.0f);
    out[i] = a != nullptr ? a[i] + kept : kept;
  }
}

__global__ void dropout_add_backward_kernel(float* db, const float* dout, int64_t R, int64_t C,
                                            DropoutSite site) {
  const bool active = site.active();
  TESSEL_GRID_LOOP(i, R * C) db[i] += dout[i] * (active ? dropout_factor(site, i / C, i % C) : 1.0f);
}

__global__ void sum_squares_kernel(double* partial, const float* x, int64_t n) {
  __shared__ double shared[kWarp];
  double sum = 0.0;
  TESSEL_GRID_LOOP(i, n) sum += static_cast<double>(x[i]) * x[i];
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

__global__ void sum_kernel(double* result, const double* values, int64_t n) {
  __shared__ double shared[kWarp];
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += values[i];
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) *result = sum;
}

__global__ void first_out_of_range_kernel(unsigned long long* first, const int32_t* ids, int64_t n,
                                          int32_t lo, int32_t hi) {
  TESSEL_GRID_LOOP(i, n) {
    if (ids[i] < lo || ids[i] >= hi) atomicMin(first, static_cast<unsigned long long>(i));
  }
}

__global__ void add_column_chunks_kernel(float* dst, const float* partial, int64_t chunks,
                                         int64_t C) {
  TESSEL_GRID_LOOP(c, C) {
    float sum = 0.0f;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) sum += partial[chunk * C + c];
    dst[c] += sum;
  }
}

CudaScratch sum_scratch, reduce_scratch, range_scratch;

}  // namespace

double sum_to_host(const double* values, int64_t n) {
  if (n == 0) return 0.0;
  double* result = reduce_scratch.reserve<double>(1);
  launch("sum_to_host", sum_kernel, 1, kReduceThreads, 0, result, values, n);
  double host = 0.0;
  cuda_memory().to_host(&host, result, sizeof(double));
  return host;
}

void add_column_chunks(float* dst, const float* partial, int64_t chunks, int64_t C) {
  launch_n("add_column_chunks", add_column_chunks_kernel, C, dst, partial, chunks, C);
}

void scale(float* x, float factor, int64_t n) { launch_n("scale", scale_kernel, n, x, factor, n); }

void residual_forward(float* out, const float* a, const float* b, int64_t n) {
  launch_n("residual_forward", residual_kernel, n, out, a, b, n);
}

void dropout_add_forward(float* out, const float* a, const float* b, int64_t R, int64_t C,
                         const DropoutSite& site) {
  launch_n("dropout_add_forward", dropout_add_kernel, R * C, out, a, b, R, C, site);
}

void dropout_add_backward(float* db, const float* dout, int64_t R, int64_t C, const DropoutSite& site) {
  launch_n("dropout_add_backward", dropout_add_backward_kernel, R * C, db, dout, R, C, site);
}

double sum_squares(const float* x, int64_t n, double sum) {
  if (n == 0) return sum;
  const int64_t blocks = std::min(kReduceBlocks, (n + kReduceThreads - 1) / kReduceThreads);
  double* partial = sum_scratch.reserve<double>(blocks);
  launch("sum_squares", sum_squares_kernel, static_cast<unsigned>(blocks), kReduceThreads, 0,
         partial, x, n);
  return sum + sum_to_host(partial, blocks);
}

int64_t find_out_of_range(const int32_t* ids, int64_t n, int32_t lo, int32_t hi) {
  if (n == 0) return -1;
  auto* first = range_scratch.reserve<unsigned long long>(1);
  const unsigned long long none = static_cast<unsigned long long>(n);
  cuda_memory().from_host(first, &none, sizeof(none));
  launch_n("find_out_of_range", first_out_of_range_kernel, n, first, ids, n, lo, hi);
  unsigned long long host = none;
  cuda_memory().to_host(&host, first, sizeof(host));
  return host == none ? -1 : static_cast<int64_t>(host);
}

}  // namespace tessel::cuda
