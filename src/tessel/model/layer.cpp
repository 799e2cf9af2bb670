#include "tessel/model/layer.h"

#include <cmath>

#include "tessel/core/error.h"

namespace tessel {

float output_init_std(const ModelConfig& cfg) { return cfg.init_method_std / std::sqrt(2.0f * cfg.num_layers); }

void report_ready(const GradReady& ready, std::initializer_list<int> params) {
  if (!ready) return;
  for (int p : params)
    if (p >= 0) ready(p);
}

int64_t declared_bytes(const std::vector<DeclaredTensor>& tensors) {
  int64_t n = 0;
  for (const DeclaredTensor& t : tensors) n += t.bytes;
  return n;
}

void TensorList::add(Tensor& tensor, Shape shape, std::string name, DType dtype) {
  const int64_t bytes = (shape_numel(shape) * dtype_size(dtype) + 63) / 64 * 64;  // 64-byte aligned
  targets_.push_back({&tensor, bytes_});
  declared_.push_back({part_, std::move(name), std::move(shape), dtype, bytes, std::nullopt});
  bytes_ += bytes;
}

void TensorList::add_growing(Tensor& tensor, Shape shape, std::string name, Growth growth) {
  const int64_t bytes = shape_numel(shape) * 4;
  targets_.push_back({&tensor, -1});
  declared_.push_back({part_, std::move(name), std::move(shape), DType::F32, bytes, growth});
}

void TensorList::allocate(const Kernels& k) {
  for (size_t i = 0; i < targets_.size(); ++i)
    if (targets_[i].offset < 0) *targets_[i].tensor = k.zeros(declared_[i].shape);
  point_into(k.zeros({bytes_ / 4}));
}

void TensorList::carve(const Tensor& arena) {
  for (size_t i = 0; i < targets_.size(); ++i)
    TESSEL_CHECK(targets_[i].offset >= 0, "TensorList: the growing buffer '{}' cannot live in shared memory",
                 declared_[i].name);
  point_into(arena);
}

void TensorList::point_into(const Tensor& arena) {
  TESSEL_CHECK(arena.bytes() >= bytes_, "TensorList: {} bytes to carve from {}", bytes_, arena.bytes());
  for (size_t i = 0; i < targets_.size(); ++i) {
    const DeclaredTensor& d = declared_[i];
    if (targets_[i].offset >= 0)
      *targets_[i].tensor = Tensor::carve(arena, targets_[i].offset, d.shape, d.dtype);
  }
  targets_.clear();
}

}  // namespace tessel
