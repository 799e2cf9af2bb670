#include "tessel/kernels/kernels.h"

#include <algorithm>

#include "tessel/core/error.h"

#ifdef TESSEL_CUDA
#include "tessel/core/cuda.h"
#include "tessel/kernels/cuda/kernels.h"
#endif

namespace tessel {

namespace {
template <typename T>
T* reserve_in(const Kernels& k, Tensor& t, int64_t rows, int64_t cols, DType dtype) {
  if (t.empty() || t.numel() < rows * cols) {
    const int64_t held = t.empty() ? 0 : t.numel() / cols;
    t = k.zeros({std::max<int64_t>(reserved_rows(held, rows), 1), cols}, dtype);
  }
  return dtype == DType::F32 ? reinterpret_cast<T*>(t.data()) : reinterpret_cast<T*>(t.ints());
}
}  // namespace

float* Kernels::reserve(Tensor& t, int64_t rows, int64_t cols) const {
  return reserve_in<float>(*this, t, rows, cols, DType::F32);
}

int32_t* Kernels::reserve_ints(Tensor& t, int64_t rows, int64_t cols) const {
  return reserve_in<int32_t>(*this, t, rows, cols, DType::I32);
}

const Kernels& kernels_for(Device device, Precision precision) {
  if (device == Device::CPU) return cpu_kernels(precision);
#ifdef TESSEL_CUDA
  TESSEL_CHECK(cuda_device_count() > 0, "--device cuda: no CUDA device is visible to this process");
  return cuda_kernels(precision);
#else
  fail("--device cuda: this build has no CUDA backend (configure with -DTESSEL_CUDA=ON)");
#endif
}

std::vector<const Kernels*> available_kernels(Precision precision) {
  std::vector<const Kernels*> backends{&cpu_kernels(precision)};
#ifdef TESSEL_CUDA
  if (cuda_device_count() > 0) backends.push_back(&cuda_kernels(precision));  // a device now
#endif
  return backends;
}

std::vector<const char*> missing_kernel_slots(const Kernels& k) {
  std::vector<const char*> missing;
#define TESSEL_CHECK_SLOT(op) \
  if (k.op == nullptr) missing.push_back(#op);
  TESSEL_KERNEL_SLOTS(TESSEL_CHECK_SLOT)
#undef TESSEL_CHECK_SLOT
  if (k.memory.alloc == nullptr || k.memory.release == nullptr || k.memory.copy == nullptr ||
      k.memory.zero == nullptr || k.memory.to_host == nullptr || k.memory.from_host == nullptr)
    missing.push_back("memory");
  return missing;
}

}  // namespace tessel
