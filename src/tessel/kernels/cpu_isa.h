// Which compilation of the CPU kernels cpu_kernels() (kernels.h) returns: TESSEL_CPU_ISA=native
// (the default) or avx2 (kernels/cpu_isa.cpp). cpu_kernels() throws tessel::Error for a value this
// build cannot honour.
#pragma once

namespace tessel {

// Whether TESSEL_CPU_ISA=avx2 chose the kernels an AVX2-only CPU computes with.
bool cpu_kernels_are_avx2();

}  // namespace tessel
