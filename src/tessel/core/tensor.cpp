#include "tessel/core/tensor.h"

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

std::shared_ptr<float> alloc_floats(int64_t n, const DeviceMemory& memory) {
  void (*release)(void*) = memory.release;
  return std::shared_ptr<float>(static_cast<float*>(memory.alloc(n * 4)),
                                [release](float* p) { release(p); });
}

std::shared_ptr<float> reserve_floats(int64_t n, const DeviceMemory& memory) {
  void (*unreserve)(void*, int64_t) = memory.unreserve;
  return std::shared_ptr<float>(static_cast<float*>(memory.reserve(n * 4)),
                                [unreserve, n](float* p) { unreserve(p, n * 4); });
}

Tensor Tensor::zeros(Shape shape, DType dtype, const DeviceMemory& memory) {
  Tensor t;
  void (*release)(void*) = memory.release;
  t.storage_ = std::shared_ptr<void>(memory.alloc(shape_numel(shape) * dtype_size(dtype)),
                                     [release](void* p) { release(p); });
  t.data_ = t.storage_.get();
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.memory_ = &memory;
  return t;
}

Tensor Tensor::view(float* data, Shape shape) {
  Tensor t;
  t.data_ = data;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::carve(const Tensor& base, int64_t byte_offset, Shape shape, DType dtype) {
  TESSEL_CHECK(byte_offset >= 0 && byte_offset + shape_numel(shape) * dtype_size(dtype) <= base.bytes(),
               "carving {} bytes at {} out of a buffer of {}", shape_numel(shape) * dtype_size(dtype),
               byte_offset, base.bytes());
  Tensor t;
  t.storage_ = base.storage_;
  t.data_ = static_cast<char*>(base.data_) + byte_offset;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.memory_ = base.memory_;
  return t;
}

float* Tensor::data() {
  TESSEL_CHECK(dtype_ == DType::F32 || data_ == nullptr, "tensor {} is {}, not f32",
               shape_str(shape_), dtype_name(dtype_));
  return static_cast<float*>(data_);
}

const float* Tensor::data() const { return const_cast<Tensor*>(this)->data(); }

int32_t* Tensor::ints() {
  TESSEL_CHECK(dtype_ == DType::I32 || data_ == nullptr, "tensor {} is {}, not i32",
               shape_str(shape_), dtype_name(dtype_));
  return static_cast<int32_t*>(data_);
}

const int32_t* Tensor::ints() const { return const_cast<Tensor*>(this)->ints(); }

Tensor Tensor::reshape(Shape shape) const {
  TESSEL_CHECK(shape_numel(shape) == numel(), "cannot reshape {} to {}", shape_str(shape_),
               shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

void Tensor::zero() { memory_->zero(data_, bytes()); }

}  // namespace tessel
