// The CUDA entry of the kernel table.
#include "tessel/core/cuda.h"
#include "tessel/kernels/cuda/kernels.h"

namespace tessel {

namespace {
Kernels make_cuda_kernels(Precision precision) {
  Kernels k;
  k.name = "cuda";
  k.memory = cuda_memory();
#define TESSEL_CUDA_SLOT(op) k.op = &cuda::op;
  TESSEL_KERNEL_SLOTS(TESSEL_CUDA_SLOT)
#undef TESSEL_CUDA_SLOT
  if (precision == Precision::BF16)
    use_rounded_gemms<cuda::gemm_bf16, cuda::bias_forward, cuda::bias_backward>(k, precision, "cuda-bf16");
  if (precision == Precision::FP16)
    use_rounded_gemms<cuda::gemm_fp16, cuda::bias_forward, cuda::bias_backward>(k, precision, "cuda-fp16");
  return k;
}
}  // namespace

const Kernels& cuda_kernels(Precision precision) {
  static const Kernels fp32 = make_cuda_kernels(Precision::FP32);
  static const Kernels bf16 = make_cuda_kernels(Precision::BF16);
  static const Kernels fp16 = make_cuda_kernels(Precision::FP16);
  return precision == Precision::BF16 ? bf16 : precision == Precision::FP16 ? fp16 : fp32;
}

}  // namespace tessel
