// Tensor: a contiguous row-major fp32 buffer with a shape. It owns its memory (64-byte aligned)
// or views another tensor's. The dtype field is there so bf16 can join without a new type.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tessel {

using Shape = std::vector<int64_t>;

enum class DType : uint8_t { F32 };

int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[4, 8, 16]"

class Tensor {
 public:
  Tensor() = default;
  // A new zero-filled tensor that owns its memory.
  static Tensor zeros(Shape shape);
  // A view of memory owned elsewhere (by another tensor or a flat parameter buffer).
  static Tensor view(float* data, Shape shape);

  float* data() { return data_; }
  const float* data() const { return data_; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  DType dtype() const { return DType::F32; }
  bool empty() const { return data_ == nullptr; }

  // The same memory under another shape with the same number of elements.
  Tensor reshape(Shape shape) const;
  void zero();

 private:
  std::shared_ptr<float> storage_;
  float* data_ = nullptr;
  Shape shape_;
};

// 64-byte aligned fp32 allocation, zero-filled; freed with the returned pointer.
std::shared_ptr<float> alloc_floats(int64_t n);

}  // namespace tessel
