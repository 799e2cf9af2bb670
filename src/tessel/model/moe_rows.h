// Row buffers of the MoE layer (moe.cpp, moe_dispatch.cpp): dropless routing cannot know in
// advance how many rows will reach a rank, so buffers grow to the largest load seen.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "tessel/core/tensor.h"

namespace tessel::moe_rows {

// t holds at least rows × cols floats afterwards (reallocated half as large again when short;
// never shrinks, so the largest routing load seen sets the size). The contents are not kept.
inline float* reserve(Tensor& t, int64_t rows, int64_t cols) {
  if (t.empty() || t.numel() < rows * cols) {
    const int64_t grown = t.empty() ? 0 : t.numel() / cols * 3 / 2;
    t = Tensor::zeros({std::max<int64_t>({rows, grown, 1}), cols});
  }
  return t.data();
}

inline void zero(float* p, int64_t rows, int64_t cols) {
  std::memset(p, 0, sizeof(float) * rows * cols);
}

}  // namespace tessel::moe_rows
