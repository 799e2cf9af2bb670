// The Mixture-of-Experts token movement around the experts: counting and slotting the routed
// assignments, the permutation into dispatch order and the weighted combination back.
#include <cstring>

#include "tessel/kernels/cpu/kernels.h"

namespace tessel::cpu {

namespace {
void axpy(float* y, float a, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

float dot(const float* a, const float* b, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}
}  // namespace

void moe_count_assignments(float* counts, const int32_t* experts, const int32_t* keep, int64_t n,
                           int64_t E) {
  std::memset(counts, 0, sizeof(float) * E);
  for (int64_t a = 0; a < n; ++a)
    if (keep == nullptr || keep[a] != 0) counts[experts[a]] += 1.0f;
}

void moe_assign_slots(int32_t* slot_row, int32_t* cursor, const int32_t* experts,
                      const int32_t* keep, int64_t n) {
  for (int64_t a = 0; a < n; ++a)
    slot_row[a] = keep[a] != 0 ? cursor[experts[a]]++ : -1;
}

void moe_permute_forward(float* send, const float* x, const int32_t* slot_row, int64_t N,
                         int64_t k, int64_t C) {
  for (int64_t a = 0; a < N * k; ++a)
    if (slot_row[a] >= 0) std::memcpy(send + slot_row[a] * C, x + a / k * C, sizeof(float) * C);
}

void moe_permute_backward(float* dx, const float* d_send, const int32_t* slot_row, int64_t N,
                          int64_t k, int64_t C) {
  for (int64_t a = 0; a < N * k; ++a)
    if (slot_row[a] >= 0) axpy(dx + a / k * C, 1.0f, d_send + slot_row[a] * C, C);
}

void moe_unpermute_forward(float* out, const float* combined, const float* probs,
                           const int32_t* slot_row, int64_t N, int64_t k, int64_t C) {
  for (int64_t n = 0; n < N; ++n) {
    float* o = out + n * C;  // (C)
    std::memset(o, 0, sizeof(float) * C);
    for (int64_t j = 0; j < k; ++j) {
      const int32_t row = slot_row[n * k + j];
      if (row >= 0) axpy(o, probs[n * k + j], combined + row * C, C);
    }
  }
}

void moe_unpermute_backward(float* d_probs, float* d_combined, const float* dout,
                            const float* combined, const float* probs, const int32_t* slot_row,
                            int64_t N, int64_t k, int64_t C) {
  for (int64_t a = 0; a < N * k; ++a) {
    const int32_t row = slot_row[a];
    const float* g = dout + a / k * C;  // (C)
    d_probs[a] = row >= 0 ? dot(g, combined + row * C, C) : 0.0f;
    if (row < 0) continue;
    for (int64_t c = 0; c < C; ++c) d_combined[row * C + c] = probs[a] * g[c];
  }
}

// Expert indices travel as floats, exact below 2^24.
void moe_pack_choices(float* choices, const int32_t* experts, const float* probs, int64_t n) {
  for (int64_t a = 0; a < n; ++a) {
    choices[a] = static_cast<float>(experts[a]);
    choices[n + a] = probs[a];
  }
}

void moe_unpack_choices(int32_t* experts, float* probs, const float* choices, int64_t G,
                        int64_t n) {
  for (int64_t r = 0; r < G; ++r) {
    const float* block = choices + 2 * n * r;
    for (int64_t a = 0; a < n; ++a) {
      experts[r * n + a] = static_cast<int32_t>(block[a]);
      probs[r * n + a] = block[n + a];
    }
  }
}

}  // namespace tessel::cpu
