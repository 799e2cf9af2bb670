#include "tessel/core/cuda.h"

#include <cstdlib>
#include <new>

#include "tessel/core/error.h"

namespace tessel {

namespace {

int local_rank() {
  for (const char* name :
       {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"}) {
    if (const char* value = std::getenv(name)) return std::atoi(value);
  }
  return 0;
}

// cudaMalloc'd bytes are 256-byte aligned (DeviceMemory asks for 64); an empty tensor still gets
// a distinct non-null pointer, as on the host.
void* cuda_alloc(int64_t bytes) {
  const size_t size = bytes > 0 ? static_cast<size_t>(bytes) : 256;
  cudaStream_t stream = cuda_stream();
  void* p = nullptr;
  const cudaError_t status = cudaMalloc(&p, size);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear it: the caller sees std::bad_alloc, as from the host
    throw std::bad_alloc();
  }
  cuda_check(status, "cudaMalloc");
  cuda_check(cudaMemsetAsync(p, 0, size, stream), "cudaMemsetAsync (zero-filled allocation)");
  return p;
}

// Kernels still queued may use the memory, and another stream (a communicator's) may too: the
// device finishes its work first. Releases are rare (buffers are sized once).
void cuda_release(void* p) {
  if (p == nullptr) return;
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize before cudaFree");
  cuda_check(cudaFree(p), "cudaFree");
}

void cuda_copy(void* dst, const void* src, int64_t bytes) {
  if (dst == src || bytes <= 0) return;
  cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cuda_stream()),
             "cudaMemcpyAsync (device to device)");
}

void cuda_zero(void* dst, int64_t bytes) {
  if (bytes <= 0) return;
  cuda_check(cudaMemsetAsync(dst, 0, bytes, cuda_stream()), "cudaMemsetAsync");
}

void cuda_to_host(void* host_dst, const void* src, int64_t bytes) {
  if (bytes <= 0) return;
  cudaStream_t stream = cuda_stream();
  cuda_check(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream),
             "cudaMemcpyAsync (device to host)");
  cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (device to host)");
}

// Synchronous: the caller may free or reuse host_src as soon as this returns.
void cuda_from_host(void* dst, const void* host_src, int64_t bytes) {
  if (bytes <= 0) return;
  cudaStream_t stream = cuda_stream();
  cuda_check(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream),
             "cudaMemcpyAsync (host to device)");
  cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (host to device)");
}

}  // namespace

void cuda_check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) fail("cuda: {}: {}", what, cudaGetErrorString(status));
}

void cuda_fail(const char* what, const char* detail) { fail("cuda: {}: {}", what, detail); }

void cuda_check_launch(const char* kernel) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) fail("cuda: kernel {}: {}", kernel, cudaGetErrorString(status));
}

int cuda_device_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // no driver or no device: not an error for a CPU run
      return 0;
    }
    return n;
  }();
  return count;
}

int cuda_device() {
  static const int device = [] {
    const int count = cuda_device_count();
    TESSEL_CHECK(count > 0, "cuda: no CUDA device is visible to this process");
    const int chosen = local_rank() % count;
    cuda_check(cudaSetDevice(chosen), "cudaSetDevice");
    return chosen;
  }();
  return device;
}

cudaStream_t cuda_stream() {
  static const cudaStream_t stream = [] {
    cuda_device();
    cudaStream_t s = nullptr;
    cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    return s;
  }();
  return stream;
}

const DeviceMemory& cuda_memory() {
  static const DeviceMemory memory{.device = Device::CUDA,
                                   .alloc = cuda_alloc,
                                   .release = cuda_release,
                                   .reserve = cuda_alloc,
                                   .unreserve = [](void* p, int64_t) { cuda_release(p); },
                                   .copy = cuda_copy,
                                   .zero = cuda_zero,
                                   .discard = cuda_zero,
                                   .to_host = cuda_to_host,
                                   .from_host = cuda_from_host};
  return memory;
}

bool cuda_is_device_pointer(const void* p) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
}

void* CudaScratch::reserve(size_t bytes) {
  if (bytes <= bytes_) return data_;
  if (data_ != nullptr) cuda_release(data_);
  data_ = cuda_memory().alloc(static_cast<int64_t>(bytes));
  bytes_ = bytes;
  return data_;
}

}  // namespace tessel
