// The CPU kernels' table; cpu_isa.cpp chooses between it and its AVX2 twin.
#include <array>

#include "tessel/core/error.h"
#include "tessel/kernels/fp8_gemm.h"
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

// The linear layer in FP8 (kernels/fp8_gemm.h) over the fp32 gemm — FP8 operands are not rounded
// again to bf16 — with the bias in fp32.
template <Fp8Scaling Scaling, bool Hybrid>
void fp8_linear_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t IC,
                        int64_t OC, WeightLayout layout) {
  linear_forward_fp8(&cpu::gemm, Fp8Recipe{Scaling, Hybrid}, {}, out, inp, weight, N, IC, OC, layout);
  if (bias != nullptr) cpu::bias_forward(out, bias, N, OC);
}

template <Fp8Scaling Scaling, bool Hybrid>
void fp8_linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                         const float* weight, int64_t N, int64_t IC, int64_t OC, WeightLayout layout) {
  linear_backward_fp8(&cpu::gemm, Fp8Recipe{Scaling, Hybrid}, {}, dinp, dweight, dout, inp, weight, N, IC, OC, layout);
  if (dbias != nullptr) cpu::bias_backward(dbias, dout, N, OC);
}

template <Fp8Scaling Scaling, bool Hybrid>
Kernels with_fp8_linears(Kernels k, const char* name) {
  k.name = name;
  k.linear_forward = &fp8_linear_forward<Scaling, Hybrid>;
  k.linear_backward = &fp8_linear_backward<Scaling, Hybrid>;
  return k;
}

// The current-scaling recipes' tables over one base table: tensorwise, blockwise, mxfp8, each in
// e4m3 and hybrid.
std::array<Kernels, 6> fp8_tables(const Kernels& base, const std::array<const char*, 6>& names) {
  return {with_fp8_linears<Fp8Scaling::Tensorwise, false>(base, names[0]),
          with_fp8_linears<Fp8Scaling::Tensorwise, true>(base, names[1]),
          with_fp8_linears<Fp8Scaling::Blockwise, false>(base, names[2]),
          with_fp8_linears<Fp8Scaling::Blockwise, true>(base, names[3]),
          with_fp8_linears<Fp8Scaling::Mxfp8, false>(base, names[4]),
          with_fp8_linears<Fp8Scaling::Mxfp8, true>(base, names[5])};
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

const Kernels& fp8_kernel_table(Precision precision, const Fp8Recipe& recipe) {
  TESSEL_CHECK(recipe.scaling != Fp8Scaling::Delayed && precision != Precision::FP16,
               "FP8 tables are built for the current-scaling recipes over fp32 or bf16");
  static const std::array<Kernels, 6> over_fp32 = fp8_tables(
      kernel_table(Precision::FP32), {"cpu-fp8-tensorwise-e4m3", "cpu-fp8-tensorwise-hybrid", "cpu-fp8-blockwise-e4m3",
                                      "cpu-fp8-blockwise-hybrid", "cpu-fp8-mxfp8-e4m3", "cpu-fp8-mxfp8-hybrid"});
  static const std::array<Kernels, 6> over_bf16 =
      fp8_tables(kernel_table(Precision::BF16),
                 {"cpu-bf16-fp8-tensorwise-e4m3", "cpu-bf16-fp8-tensorwise-hybrid", "cpu-bf16-fp8-blockwise-e4m3",
                  "cpu-bf16-fp8-blockwise-hybrid", "cpu-bf16-fp8-mxfp8-e4m3", "cpu-bf16-fp8-mxfp8-hybrid"});
  const size_t at = 2 * (static_cast<size_t>(recipe.scaling) - 1) + (recipe.hybrid ? 1 : 0);
  return (precision == Precision::BF16 ? over_bf16 : over_fp32)[at];
}
}  // namespace cpu

}  // namespace tessel
