// Token (+ learned position) embeddings: a row gather forward, a row scatter-add backward.
#include <algorithm>

#include "tessel/kernels/cpu/kernels.h"
#include "tessel/kernels/cpu/vec_math.h"

namespace tessel::cpu {

void embedding_forward(float* out, const int32_t* tokens, const int32_t* positions,
                       const float* wte, const float* wpe, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static) if (worth_parallel(N * C))
  for (int64_t n = 0; n < N; ++n) {
    float* out_n = out + n * C;  // (C)
    if (tokens[n] < 0) {         // another tensor-parallel rank's part of the vocabulary
      std::fill(out_n, out_n + C, 0.0f);
      continue;
    }
    const float* wte_n = wte + tokens[n] * C;  // (C)
    if (wpe == nullptr) {
      std::copy(wte_n, wte_n + C, out_n);
      continue;
    }
    const float* wpe_n = wpe + positions[n] * C;  // (C)
    for (int64_t c = 0; c < C; ++c) out_n[c] = wte_n[c] + wpe_n[c];
  }
}

// Rows repeat (the same token twice in a batch), so threads split the channels, not the rows:
// each thread adds the rows in order into its own columns, which is race-free and gives the same
// sums on every run.
static void scatter_add_rows(float* table, const float* dout, const int32_t* index, int64_t N,
                             int64_t C) {
  constexpr int64_t block = 64;
  const int64_t blocks = (C + block - 1) / block;
#pragma omp parallel for schedule(static) if (worth_parallel(N * C))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t c0 = b * block, width = std::min(block, C - c0);
    for (int64_t n = 0; n < N; ++n) {
      if (index[n] < 0) continue;
      float* row = table + index[n] * C + c0;
      const float* d = dout + n * C + c0;
      for (int64_t c = 0; c < width; ++c) row[c] += d[c];
    }
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        const int32_t* positions, int64_t N, int64_t C) {
  if (dwte != nullptr) scatter_add_rows(dwte, dout, tokens, N, C);
  if (dwpe != nullptr) scatter_add_rows(dwpe, dout, positions, N, C);
}

void embedding_shard_ids(int32_t* local, const int32_t* tokens, int64_t N, int64_t vocab_start,
                         int64_t V_valid) {
  for (int64_t n = 0; n < N; ++n) {
    const int64_t id = tokens[n] - vocab_start;
    local[n] = id >= 0 && id < V_valid ? static_cast<int32_t>(id) : -1;
  }
}

}  // namespace tessel::cpu
