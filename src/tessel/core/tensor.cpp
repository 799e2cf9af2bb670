#include "tessel/core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "tessel/core/error.h"

namespace tessel {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::shared_ptr<float> alloc_floats(int64_t n) {
  size_t bytes = (static_cast<size_t>(n) * sizeof(float) + 63) / 64 * 64;
  if (bytes == 0) bytes = 64;
  void* p = std::aligned_alloc(64, bytes);
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, bytes);
  return std::shared_ptr<float>(static_cast<float*>(p), [](float* q) { std::free(q); });
}

Tensor Tensor::zeros(Shape shape) {
  Tensor t;
  t.storage_ = alloc_floats(shape_numel(shape));
  t.data_ = t.storage_.get();
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::view(float* data, Shape shape) {
  Tensor t;
  t.data_ = data;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::reshape(Shape shape) const {
  TESSEL_CHECK(shape_numel(shape) == numel(), "cannot reshape {} to {}", shape_str(shape_),
               shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

void Tensor::zero() { std::memset(data_, 0, sizeof(float) * numel()); }

}  // namespace tessel
