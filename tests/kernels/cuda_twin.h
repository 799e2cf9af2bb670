// Test buffers that exist twice — on the host for the CPU reference, in device memory for the CUDA
// kernel — with the same initial contents, so one lambda runs a kernel on both tables and the
// results are compared afterwards: `run_both([&](const Kernels& k) { k.op(out.on(k), ...); })`.
// Outputs that a kernel overwrites start as NaN on both sides (an element the CUDA kernel leaves
// unwritten fails the comparison); outputs it accumulates into start as the same random values.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tessel/core/cuda.h"
#include "tessel/kernels/cuda/kernels.h"

namespace tessel::cuda_test {

// The CUDA tests' fixture: skipped, saying why, where no device is visible.
class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount is 0)";
  }
  std::mt19937 rng{20261201};
};

template <typename T>
class Twin {
 public:
  explicit Twin(std::vector<T> values) : host_(std::move(values)) {
    const DeviceMemory& memory = cuda_memory();
    void (*release)(void*) = memory.release;
    device_ = std::shared_ptr<void>(memory.alloc(bytes()), [release](void* p) { release(p); });
    memory.from_host(device_.get(), host_.data(), bytes());
  }
  // This buffer on k's side: the host copy for the CPU table, the device copy for CUDA.
  T* on(const Kernels& k) {
    return k.memory.device == Device::CPU ? host_.data() : static_cast<T*>(device_.get());
  }
  const std::vector<T>& cpu() const { return host_; }
  std::vector<T> cuda() const {
    std::vector<T> values(host_.size());
    cuda_memory().to_host(values.data(), device_.get(), bytes());
    return values;
  }
  int64_t size() const { return static_cast<int64_t>(host_.size()); }

 private:
  int64_t bytes() const { return static_cast<int64_t>(host_.size() * sizeof(T)); }
  std::vector<T> host_;
  std::shared_ptr<void> device_;
};

using Floats = Twin<float>;
using Ints = Twin<int32_t>;

inline std::vector<float> uniform(std::mt19937& rng, int64_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}
inline Floats random_floats(std::mt19937& rng, int64_t n, float lo = -1.0f, float hi = 1.0f) {
  return Floats(uniform(rng, n, lo, hi));
}
inline Floats poisoned(int64_t n) { return Floats(std::vector<float>(n, NAN)); }
inline Ints random_ints(std::mt19937& rng, int64_t n, int32_t lo, int32_t hi) {  // [lo, hi)
  std::uniform_int_distribution<int32_t> dist(lo, hi - 1);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(rng);
  return Ints(v);
}

// Runs f on the CPU table, then on the CUDA table, both in the given precision (BF16: the CUDA
// bf16 GEMMs against the CPU's emulation of the same rounding).
template <typename F>
void run_both(F&& f, Precision precision = Precision::FP32) {
  f(cpu_kernels(precision));
  f(cuda_kernels(precision));
}

// ‖cuda − cpu‖ / ‖cpu‖ ≤ tolerance (the fp32 bound is 1e-5); infinities must match
// exactly (lse of rows that see no key), NaN never passes.
inline void expect_close(const Floats& t, const std::string& what, double tolerance = 1e-5) {
  const std::vector<float> ref = t.cpu(), got = t.cuda();
  double diff = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isinf(ref[i]) || std::isinf(got[i])) {
      ASSERT_EQ(ref[i], got[i]) << what << ": element " << i;
      continue;
    }
    ASSERT_FALSE(std::isnan(got[i]) || std::isnan(ref[i])) << what << ": NaN at element " << i;
    diff += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
    norm += double(ref[i]) * ref[i];
  }
  const double relative = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
  EXPECT_LE(relative, tolerance) << what << ": relative error " << relative << " over "
                                 << ref.size() << " elements";
}

inline void expect_equal(const Ints& t, const std::string& what) {
  EXPECT_EQ(t.cuda(), t.cpu()) << what;
}

// Two host values (a kernel's returned scalar) within the same relative bound.
inline void expect_close(double cuda, double cpu, const std::string& what,
                         double tolerance = 1e-5) {
  EXPECT_LE(std::abs(cuda - cpu), tolerance * std::max(1.0, std::abs(cpu)))
      << what << ": cuda " << cuda << ", cpu " << cpu;
}

// The value a kernel returns on each side: {cpu, cuda}.
template <typename F>
auto both_results(F&& f) {
  auto cpu = f(cpu_kernels());
  auto cuda = f(cuda_kernels());
  return std::make_pair(cpu, cuda);
}

}  // namespace tessel::cuda_test
