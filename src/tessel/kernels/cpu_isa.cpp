// Which compilation of the CPU kernels runs (TESSEL_CPU_ISA, read once per process), as
// ATEN_CPU_CAPABILITY chooses PyTorch's: `native` (the default), the kernels of this build's
// -march; `avx2`, the kernels as an AVX2-only CPU's native build computes them — on an AVX-512
// build its AVX2 twin (cmake/cpu_isa_twin.cmake) — with oneDNN capped at AVX2 as well. The
// vector width decides the order of the kernels' sums and oneDNN's, so `avx2` gives an AVX-512
// machine the results, bit for bit, that an AVX2 machine gets (scripts/test-avx2.sh).
#include <oneapi/dnnl/dnnl.h>

#include <cstdlib>
#include <string>

#include "tessel/core/error.h"
#include "tessel/kernels/cpu_isa.h"
#include "tessel/kernels/fp8_kernels.h"
#include "tessel/kernels/kernels.h"

namespace tessel {

namespace cpu {
const Kernels& kernel_table(Precision precision);
const Kernels& fp8_kernel_table(Precision precision, const Fp8Recipe& recipe);
}
#ifdef TESSEL_CPU_AVX2_TWIN
namespace cpu_avx2 {
const Kernels& kernel_table(Precision precision);
const Kernels& fp8_kernel_table(Precision precision, const Fp8Recipe& recipe);
}
#endif

namespace {

// What this build's own kernels were compiled for (the compiler's -march, as these files').
#if defined(__AVX512F__)
constexpr const char* kNativeIsa = "AVX-512";
#elif defined(__AVX2__) && defined(__FMA__)
constexpr const char* kNativeIsa = "AVX2";
#else
constexpr const char* kNativeIsa = "";  // neither: the x86-64 baseline or another machine
#endif

enum class CpuIsa { Native, Avx2 };

CpuIsa chosen_isa() {
  const char* value = std::getenv("TESSEL_CPU_ISA");
  const std::string isa = value ? value : "native";
  if (isa == "native") return CpuIsa::Native;
  TESSEL_CHECK(isa == "avx2", "TESSEL_CPU_ISA={}: expected native or avx2", isa);
#ifndef TESSEL_CPU_AVX2_TWIN
  TESSEL_CHECK(std::string(kNativeIsa) == "AVX2",
               "TESSEL_CPU_ISA=avx2: this build's CPU kernels are compiled for {} and it has no AVX2 "
               "twin (built only beside -march=native with AVX-512)",
               *kNativeIsa ? kNativeIsa : "neither AVX2 nor AVX-512");
#endif
  const dnnl_status_t capped = dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx2);
  TESSEL_CHECK(capped == dnnl_success,
               "TESSEL_CPU_ISA=avx2: oneDNN cannot be capped at AVX2 (status {}): it has already "
               "generated code",
               static_cast<int>(capped));
  return CpuIsa::Avx2;
}

CpuIsa cpu_isa() {
  static const CpuIsa isa = chosen_isa();
  return isa;
}

}  // namespace

const Kernels& cpu_kernels(Precision precision) {
#ifdef TESSEL_CPU_AVX2_TWIN
  if (cpu_isa() == CpuIsa::Avx2) return cpu_avx2::kernel_table(precision);
#else
  cpu_isa();  // refuses what it cannot honour, caps oneDNN
#endif
  return cpu::kernel_table(precision);
}

const Kernels& fp8_kernels_for(Device device, Precision precision, const Fp8Recipe& recipe) {
  TESSEL_CHECK(device == Device::CPU, "--fp8-format: FP8 GEMMs are built for the CPU only (an emulation), not yet for CUDA");
#ifdef TESSEL_CPU_AVX2_TWIN
  if (cpu_isa() == CpuIsa::Avx2) return cpu_avx2::fp8_kernel_table(precision, recipe);
#else
  cpu_isa();  // refuses what it cannot honour, caps oneDNN
#endif
  return cpu::fp8_kernel_table(precision, recipe);
}

bool cpu_kernels_are_avx2() { return cpu_isa() == CpuIsa::Avx2; }

}  // namespace tessel
