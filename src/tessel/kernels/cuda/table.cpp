// The CUDA entry of the kernel table.
#include "tessel/core/cuda.h"
#include "tessel/kernels/cuda/kernels.h"

namespace tessel {

namespace {
Kernels make_cuda_kernels() {
  Kernels k;
  k.name = "cuda";
  k.memory = cuda_memory();
#define TESSEL_CUDA_SLOT(op) k.op = &cuda::op;
  TESSEL_KERNEL_SLOTS(TESSEL_CUDA_SLOT)
#undef TESSEL_CUDA_SLOT
  return k;
}
}  // namespace

const Kernels& cuda_kernels() {
  static const Kernels k = make_cuda_kernels();
  return k;
}

}  // namespace tessel
