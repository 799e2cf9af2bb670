// The CPU kernels' table; cpu_isa.cpp chooses between it and its AVX2 twin.
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
    use_rounded_gemms<cpu::gemm_bf16, cpu::bias_forward, cpu::bias_backward>(k, precision, "cpu-bf16");
  if (precision == Precision::FP16)
    use_rounded_gemms<cpu::gemm_fp16, cpu::bias_forward, cpu::bias_backward>(k, precision, "cpu-fp16");
  return k;
}

}  // namespace

namespace cpu {
// Named through the namespace, so that the AVX2 twin (cmake/cpu_isa_twin.cmake) has its own.
const Kernels& kernel_table(Precision precision) {
  static const Kernels fp32 = make_cpu_kernels(Precision::FP32);
  static const Kernels bf16 = make_cpu_kernels(Precision::BF16);
  static const Kernels fp16 = make_cpu_kernels(Precision::FP16);
  return precision == Precision::BF16 ? bf16 : precision == Precision::FP16 ? fp16 : fp32;
}
}  // namespace cpu

}  // namespace tessel
