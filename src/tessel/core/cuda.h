// The CUDA runtime as tessel uses it (built with TESSEL_CUDA only): one device and one stream
// per process, the DeviceMemory of that device, and error checks that throw tessel::Error.
//
// Every CUDA kernel of the table runs on cuda_stream(), in call order, so a kernel sees what
// the kernels before it wrote without any synchronisation; the host waits only where it reads a
// value (to_host, kernels that return a host value). Communicators with streams of their own
// (comm/nccl.h) order themselves against it with events.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "tessel/core/device.h"

namespace tessel {

// CUDA devices visible to this process; 0 without a driver or device (never throws).
int cuda_device_count();

// The device this process uses: its local rank (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID,
// SLURM_LOCALID or LOCAL_RANK; 0 without a launcher) modulo the devices visible, chosen on
// first use. Throws tessel::Error when there is no device.
int cuda_device();

// The stream every kernel and memory operation of the CUDA backend runs on (created on first
// use, after cudaSetDevice(cuda_device())).
cudaStream_t cuda_stream();

// The device's memory (cudaMalloc, zero-filled; copies and zeroing on cuda_stream(); to_host
// and from_host return once the bytes have arrived).
const DeviceMemory& cuda_memory();

// Whether p points into device memory (cudaMalloc'd), as opposed to host memory.
bool cuda_is_device_pointer(const void* p);

// Throws tessel::Error "cuda: <what>: <error string>" unless status is cudaSuccess.
void cuda_check(cudaError_t status, const char* what);
// Throws tessel::Error "cuda: <what>: <detail>" (a library's own status, cuBLAS's say).
[[noreturn]] void cuda_fail(const char* what, const char* detail);
// After a kernel launch: the launch's own error (bad configuration), named after the kernel.
void cuda_check_launch(const char* kernel);

// A device buffer that grows to the largest size asked for and is kept: scratch space of the
// kernels that need it, allocated on the first calls and reused afterwards (no allocation in the
// training loop). Deliberately never freed: process exit releases it, and freeing from a static
// destructor would race the CUDA runtime's own teardown.
class CudaScratch {
 public:
  void* reserve(size_t bytes);
  template <typename T>
  T* reserve(int64_t count) {
    return static_cast<T*>(reserve(static_cast<size_t>(count) * sizeof(T)));
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace tessel
