// Tensor: a contiguous row-major buffer with a shape, a dtype and the device memory it lives in.
// It owns its memory (allocated through a DeviceMemory, 64-byte aligned, zero-filled) or views
// another's. Host code reads a device tensor's values only through to_host (core/device.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessel/core/device.h"

namespace tessel {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[4, 8, 16]"

class Tensor {
 public:
  Tensor() = default;
  // A new zero-filled tensor that owns its memory, on the host unless `memory` says otherwise.
  static Tensor zeros(Shape shape, DType dtype = DType::F32,
                      const DeviceMemory& memory = host_memory());
  // A view of fp32 host memory owned elsewhere (by another tensor or a flat parameter buffer).
  static Tensor view(float* data, Shape shape);
  // A tensor of `shape` and `dtype` inside `base`'s memory from `byte_offset` on; it keeps base's
  // memory alive. (One allocation carved into many tensors.)
  static Tensor carve(const Tensor& base, int64_t byte_offset, Shape shape, DType dtype);

  // The elements as fp32 (F32 tensors) or int32 (I32 tensors); checked.
  float* data();
  const float* data() const;
  int32_t* ints();
  const int32_t* ints() const;

  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  int64_t bytes() const { return numel() * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return memory_->device; }
  const DeviceMemory& memory() const { return *memory_; }
  bool empty() const { return data_ == nullptr; }

  // The same memory under another shape with the same number of elements.
  Tensor reshape(Shape shape) const;
  void zero();

 private:
  std::shared_ptr<void> storage_;
  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::F32;
  const DeviceMemory* memory_ = &host_memory();
};

// A zero-filled allocation of n fp32 values in `memory`; freed with the returned pointer.
std::shared_ptr<float> alloc_floats(int64_t n, const DeviceMemory& memory = host_memory());
// The same through DeviceMemory::reserve: pages taken only when written, on the host.
std::shared_ptr<float> reserve_floats(int64_t n, const DeviceMemory& memory = host_memory());

}  // namespace tessel
