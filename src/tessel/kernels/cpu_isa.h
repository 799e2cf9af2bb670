// Which compilation of the CPU kernels cpu_kernels() (kernels.h) returns: TESSEL_CPU_ISA=native
// (the default) or avx2 (kernels/cpu_isa.cpp). cpu_kernels() throws tessel::Error for a value this
// build cannot honour.
#pragma once

namespace tessel {

// "native" or "avx2", as TESSEL_CPU_ISA chose.
const char* cpu_kernels_isa();

}  // namespace tessel
