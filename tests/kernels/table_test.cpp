// The kernel table: every backend built into this binary fills every slot, memory included, and
// so does the CPU kernels' AVX2 twin where the build has one.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tessel/kernels/kernels.h"

namespace tessel {
namespace {

TEST(KernelTable, EveryBackendFillsEverySlot) {
  const std::vector<const Kernels*> backends = available_kernels();
  ASSERT_FALSE(backends.empty());
  EXPECT_EQ(backends.front(), &cpu_kernels());
  for (const Kernels* k : backends) {
    ASSERT_NE(k->name, nullptr);
    const std::vector<const char*> missing = missing_kernel_slots(*k);
    EXPECT_TRUE(missing.empty()) << k->name << " leaves empty: " << fmt::format("{}", fmt::join(missing, ", "));
  }
}

TEST(KernelTable, AnEmptySlotIsFound) {
  Kernels k = cpu_kernels();
  k.rmsnorm_backward = nullptr;
  k.memory.to_host = nullptr;
  const std::vector<const char*> missing = missing_kernel_slots(k);
  ASSERT_EQ(missing.size(), 2u);
  EXPECT_STREQ(missing[0], "rmsnorm_backward");
  EXPECT_STREQ(missing[1], "memory");
}

TEST(KernelTable, ReserveGrowsAndKeepsItsLargestSize) {
  const Kernels& k = cpu_kernels();
  Tensor t;
  k.reserve(t, 4, 3);
  EXPECT_EQ(t.numel(), 12);
  k.reserve(t, 2, 3);  // smaller: kept
  EXPECT_EQ(t.numel(), 12);
  k.reserve(t, 5, 3);  // half as large again as the 4 rows held
  EXPECT_EQ(t.shape(), (Shape{6, 3}));
  Tensor ids;
  k.reserve_ints(ids, 3, 1);
  EXPECT_EQ(ids.dtype(), DType::I32);
  EXPECT_EQ(ids.bytes(), 12);
}

#ifdef TESSEL_CPU_AVX2_TWIN
}  // namespace
namespace cpu {
const Kernels& kernel_table(Precision precision);
}
namespace cpu_avx2 {
const Kernels& kernel_table(Precision precision);
}
namespace {

// TESSEL_CPU_ISA=avx2's table (cmake/cpu_isa_twin.cmake): complete, in every precision, and made
// of its own functions, not the native kernels under another name.
TEST(KernelTable, TheAvx2TwinIsCompleteAndItsOwn) {
  for (const Precision precision : {Precision::FP32, Precision::BF16, Precision::FP16}) {
    const Kernels& twin = cpu_avx2::kernel_table(precision);
    const Kernels& native = cpu::kernel_table(precision);
    EXPECT_TRUE(missing_kernel_slots(twin).empty()) << fmt::format("{}", fmt::join(missing_kernel_slots(twin), ", "));
    EXPECT_EQ(twin.precision, precision);
    EXPECT_NE(twin.layernorm_forward, native.layernorm_forward);
    EXPECT_NE(twin.attention_forward, native.attention_forward);
    EXPECT_NE(twin.gemm, native.gemm);
  }
}
#endif

}  // namespace
}  // namespace tessel
