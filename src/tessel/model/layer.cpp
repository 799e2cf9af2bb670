#include "tessel/model/layer.h"

#include <cmath>

namespace tessel {

float output_init_std(int num_layers) { return kInitStd / std::sqrt(2.0f * num_layers); }

void report_ready(const GradReady& ready, std::initializer_list<int> params) {
  if (!ready) return;
  for (int p : params)
    if (p >= 0) ready(p);
}

void SavedBuffers::add(Tensor& tensor, Shape shape, DType dtype) {
  const int64_t bytes = shape_numel(shape) * dtype_size(dtype);
  entries_.push_back({&tensor, std::move(shape), dtype, bytes_});
  bytes_ += (bytes + 63) / 64 * 64;  // every tensor starts 64-byte aligned
}

void SavedBuffers::allocate(const Kernels& k) {
  const Tensor arena = k.zeros({bytes_ / 4});
  for (const Entry& e : entries_) *e.tensor = Tensor::carve(arena, e.offset, e.shape, e.dtype);
  entries_.clear();
}

int64_t ChunkScratch::bytes() const {
  int64_t n = 0;
  for (const Tensor* t : {&full, &norm_out, &full_grad, &rows_full, &d_heads, &d_hidden}) n += t->bytes();
  // local and local_grad are views without sequence parallel
  if (local.data() != full.data()) n += local.bytes();
  if (local_grad.data() != full_grad.data()) n += local_grad.bytes();
  return n;
}

}  // namespace tessel
