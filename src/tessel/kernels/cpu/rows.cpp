// Context parallelism's row movement: a rank's rows of whole sequences, K/V blocks packed for the
// ring, and the all-gather path's reorder between rank-major blocks and global positions.
#include <algorithm>

#include "tessel/kernels/cpu/kernels.h"

namespace tessel::cpu {

void cp_take_rows(int32_t* out, const int32_t* in, const int32_t* positions, int64_t B, int64_t T,
                  int64_t T_l, int64_t width) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T_l; ++t)
      std::copy_n(in + (b * T + positions[t]) * width, width, out + (b * T_l + t) * width);
}

void cp_pack_kv(float* kv, const float* k, const float* v, int64_t N, int64_t width, int64_t k_ld,
                int64_t v_ld) {
  for (int64_t n = 0; n < N; ++n) {
    std::copy_n(k + n * k_ld, width, kv + n * width);
    std::copy_n(v + n * v_ld, width, kv + (N + n) * width);
  }
}

void cp_unpack_add_kv(float* dk, float* dv, const float* kv_grad, int64_t N, int64_t width,
                      int64_t k_ld, int64_t v_ld) {
  for (int64_t n = 0; n < N; ++n) {
    const float* gk = kv_grad + n * width;
    const float* gv = kv_grad + (N + n) * width;
    for (int64_t j = 0; j < width; ++j) dk[n * k_ld + j] += gk[j];
    for (int64_t j = 0; j < width; ++j) dv[n * v_ld + j] += gv[j];
  }
}

namespace {
// Calls move(global row, rank-major row) for every row of every rank's K/V block.
template <typename Move>
void for_each_kv_row(const int32_t* positions, int64_t CP, int64_t B, int64_t T_l, int64_t width,
                     Move move) {
  const int64_t T = CP * T_l, count = 2 * B * T_l * width;  // one rank's packed block
  for (int64_t rank = 0; rank < CP; ++rank)
    for (int64_t part = 0; part < 2; ++part)  // K, V
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T_l; ++t)
          move(((part * B + b) * T + positions[rank * T_l + t]) * width,
               rank * count + ((part * B + b) * T_l + t) * width);
}
}  // namespace

void cp_kv_to_global(float* global, const float* rank_major, const int32_t* positions, int64_t CP,
                     int64_t B, int64_t T_l, int64_t width) {
  for_each_kv_row(positions, CP, B, T_l, width, [&](int64_t g, int64_t r) {
    std::copy_n(rank_major + r, width, global + g);
  });
}

void cp_kv_from_global(float* rank_major, const float* global, const int32_t* positions,
                       int64_t CP, int64_t B, int64_t T_l, int64_t width) {
  for_each_kv_row(positions, CP, B, T_l, width, [&](int64_t g, int64_t r) {
    std::copy_n(global + g, width, rank_major + r);
  });
}

}  // namespace tessel::cpu
