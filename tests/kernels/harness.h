// The kernel harness, in the spirit of ggml's test-backend-ops: one table of cases for every
// operation of the kernel table (kernels/kernels.h), each case checking an op's forward against a
// double-precision reference (support/reference.h and the case files) and its backward against
// central finite differences of that reference; harness_test.cpp runs every case on every backend
// available_kernels() lists, and fails when a slot of the table has no case. A new op adds a case;
// a new backend adds nothing here.
//
// Cases see the backend only through `const Kernels&` and its memory: inputs are uploaded into
// Buffers, kernels get Buffer::data() (device pointers), checks read Buffer::host().
#pragma once

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "support/gradient_check.h"
#include "tessel/core/philox.h"
#include "tessel/kernels/bf16.h"
#include "tessel/kernels/fp16.h"
#include "tessel/kernels/kernels.h"

namespace tessel::testing {

using Ints = std::vector<int32_t>;

constexpr double kForwardTolerance = 1e-5;   // relative error of a float forward
constexpr double kGradientTolerance = 1e-4;  // relative error against finite differences
constexpr double kBf16Tolerance = 2e-2;  // relative, a --bf16 product against fp32's

// One entry of the table: `check` runs the case's assertions on one backend; `slots` names the
// table slots it checks, and the harness fails a case that never calls one of them.
struct KernelCase {
  std::string name;  // lower_snake_case, unique; the test is Backends/KernelOps.Check/<backend>_<name>
  std::vector<std::string> slots;
  std::function<void(const Kernels&)> check;
};

// Adds cases to the table (at namespace scope in a case file: `const bool kRegistered =
// add_kernel_cases({...});`). Returns true.
bool add_kernel_cases(std::vector<KernelCase> cases);
const std::vector<KernelCase>& kernel_cases();

// n values of T in a backend's memory, filled from the host.
template <typename T>
class Buffer {
 public:
  Buffer(const Kernels& k, const std::vector<T>& values)
      : memory_(&k.memory), n_(static_cast<int64_t>(values.size())) {
    void* p = memory_->alloc(n_ * static_cast<int64_t>(sizeof(T)));
    data_ = std::shared_ptr<T>(static_cast<T*>(p), [release = memory_->release](T* q) { release(q); });
    set(values);
  }
  // Braced values ({0}) are values, never a size.
  Buffer(const Kernels& k, std::initializer_list<T> values) : Buffer(k, std::vector<T>(values)) {}
  Buffer(const Kernels& k, int64_t n, T fill = T{}) : Buffer(k, std::vector<T>(n, fill)) {}

  T* data() const { return data_.get(); }
  int64_t size() const { return n_; }
  std::vector<T> host() const {
    std::vector<T> values(n_);
    memory_->to_host(values.data(), data_.get(), n_ * static_cast<int64_t>(sizeof(T)));
    return values;
  }
  void set(const std::vector<T>& values) {
    EXPECT_EQ(static_cast<int64_t>(values.size()), n_);
    memory_->from_host(data_.get(), values.data(), n_ * static_cast<int64_t>(sizeof(T)));
  }

 private:
  const DeviceMemory* memory_;
  int64_t n_;
  std::shared_ptr<T> data_;
};
using FloatBuffer = Buffer<float>;
using IntBuffer = Buffer<int32_t>;

// The seed of the cases' random inputs unless a case names its own.
constexpr uint64_t kSeed = 20240611;

// offset + scale · N(0, 1), element i of Philox stream `stream`.
inline Floats random_floats(int64_t n, uint64_t stream, float scale = 1.0f, float offset = 0.0f,
                            uint64_t seed = kSeed) {
  Floats x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = offset + scale * random_normal(seed, stream, i);
  return x;
}

// n indices in [0, bound).
inline Ints random_indices(int64_t n, int32_t bound, uint64_t stream, uint64_t seed = kSeed) {
  Ints idx(n);
  for (int64_t i = 0; i < n; ++i)
    idx[i] = static_cast<int32_t>(random_bits(seed, stream, i) % bound);
  return idx;
}

inline Vec to_double(const Floats& x) { return Vec(x.begin(), x.end()); }

// x with every element rounded as a `precision` table's GEMM reads it (kernels/bf16.h,
// kernels/fp16.h): what a --bf16 or --fp16 GEMM reads.
inline Floats rounded_as(Precision precision, Floats x) {
  for (float& v : x)
    v = precision == Precision::BF16 ? round_to_bf16(v) : precision == Precision::FP16 ? round_to_fp16(v) : v;
  return x;
}

// max |a - ref| / max(1, max |ref|): elementwise, where relative_error is over the whole vector.
inline double max_relative_error(const Floats& a, const Vec& ref) {
  EXPECT_EQ(a.size(), ref.size());
  double err = 0, scale = 1;
  for (size_t i = 0; i < ref.size() && i < a.size(); ++i) {
    err = std::max(err, std::abs(a[i] - ref[i]));
    scale = std::max(scale, std::abs(ref[i]));
  }
  return err / scale;
}

// Sets the OpenMP thread count for one scope.
class ThreadCount {
 public:
  explicit ThreadCount(int threads) : saved_(omp_get_max_threads()) { omp_set_num_threads(threads); }
  ~ThreadCount() { omp_set_num_threads(saved_); }

 private:
  int saved_;
};

// Runs a kernel's backward with dout = w, writing input i's gradient into grads[i], a device
// pointer (nullptr: not requested).
using Backward = std::function<void(const std::vector<float*>& grads)>;

// Checks every gradient of an accumulating backward against finite differences of the reference
// f (the objective Σ f(inputs) · w), and that
// - two calls, starting from random nonzero buffers, add exactly twice the gradient to them;
// - with only one gradient requested (the others nullptr) that gradient is still right.
void check_backward(const Kernels& k, const Reference& f, const std::vector<Floats>& inputs,
                    const Vec& w, const Backward& backward);

}  // namespace tessel::testing
