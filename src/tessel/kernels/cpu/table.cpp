// The CPU entry of the kernel table.
#include "tessel/kernels/kernels.h"

namespace tessel {

namespace {
Kernels make_cpu_kernels() {
  Kernels k;
  k.name = "cpu";
  k.memory = host_memory();
#define TESSEL_CPU_SLOT(op) k.op = &cpu::op;
  TESSEL_KERNEL_SLOTS(TESSEL_CPU_SLOT)
#undef TESSEL_CPU_SLOT
  return k;
}

}  // namespace

const Kernels& cpu_kernels() {
  static const Kernels k = make_cpu_kernels();
  return k;
}

}  // namespace tessel
