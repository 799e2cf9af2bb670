// The CPU entry of the kernel table.
#include "tessel/kernels/kernels.h"

namespace tessel {

namespace {
Kernels make_cpu_kernels(Precision precision) {
  Kernels k;
  k.name = "cpu";
  k.memory = host_memory();
#define TESSEL_CPU_SLOT(op) k.op = &cpu::op;
  TESSEL_KERNEL_SLOTS(TESSEL_CPU_SLOT)
#undef TESSEL_CPU_SLOT
  if (precision == Precision::BF16)
    use_bf16_gemms<cpu::gemm_bf16, cpu::bias_forward, cpu::bias_backward>(k, "cpu-bf16");
  return k;
}

}  // namespace

const Kernels& cpu_kernels(Precision precision) {
  static const Kernels fp32 = make_cpu_kernels(Precision::FP32);
  static const Kernels bf16 = make_cpu_kernels(Precision::BF16);
  return precision == Precision::BF16 ? bf16 : fp32;
}

}  // namespace tessel
