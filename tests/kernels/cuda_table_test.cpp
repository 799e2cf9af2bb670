// The CUDA kernel table, without a device: every slot filled, the device memory named, and the
// table listed by available_kernels() exactly when a device is visible.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "tessel/core/cuda.h"
#include "tessel/kernels/cuda/kernels.h"

namespace tessel {
namespace {

TEST(CudaKernelTable, EverySlotIsFilled) {
  const Kernels& k = cuda_kernels();
  EXPECT_STREQ(k.name, "cuda");
  EXPECT_EQ(k.memory.device, Device::CUDA);
  const std::vector<const char*> missing = missing_kernel_slots(k);
  EXPECT_TRUE(missing.empty()) << "cuda leaves empty: "
                               << fmt::format("{}", fmt::join(missing, ", "));
}

TEST(CudaKernelTable, EverySlotIsItsOwn) {
  // No slot borrows the CPU's function: a CPU kernel would read device pointers as host memory.
  const Kernels& cuda = cuda_kernels();
  const Kernels& cpu = cpu_kernels();
  std::vector<const char*> shared;
#define TESSEL_SAME_SLOT(op)                                                           \
  if (reinterpret_cast<const void*>(cuda.op) == reinterpret_cast<const void*>(cpu.op)) \
    shared.push_back(#op);
  TESSEL_KERNEL_SLOTS(TESSEL_SAME_SLOT)
#undef TESSEL_SAME_SLOT
  EXPECT_TRUE(shared.empty()) << "cuda uses the CPU's "
                              << fmt::format("{}", fmt::join(shared, ", "));
}

TEST(CudaKernelTable, ListedWhenADeviceIsVisible) {
  const std::vector<const Kernels*> backends = available_kernels();
  const bool listed =
      std::find(backends.begin(), backends.end(), &cuda_kernels()) != backends.end();
  EXPECT_EQ(listed, cuda_device_count() > 0)
      << "available_kernels() lists cuda: " << listed << ", devices: " << cuda_device_count();
  EXPECT_EQ(backends.front(), &cpu_kernels());
}

}  // namespace
}  // namespace tessel
