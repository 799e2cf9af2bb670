// Context parallelism's row movement: a rank's rows of whole sequences, K/V blocks packed for the
// ring, rank-major blocks to and from global positions (the all-gather path, the Gated DeltaNet's
// head all-to-all), and column blocks to and from ranks (the head all-to-all).
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
// Calls move(global row's offset, rank block row's offset) for every row of every rank's block.
template <typename Move>
void for_each_rank_row(const int32_t* positions, int64_t CP, int64_t B, int64_t T_l, int64_t ld,
                       int64_t rank_stride, int64_t width, Move move) {
  const int64_t T = CP * T_l;
  for (int64_t rank = 0; rank < CP; ++rank)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T_l; ++t)
        move((b * T + positions[rank * T_l + t]) * ld, rank * rank_stride + (b * T_l + t) * width);
}
}  // namespace

void cp_rows_to_global(float* out, int64_t ld, const float* blocks, int64_t rank_stride,
                       const int32_t* positions, int64_t CP, int64_t B, int64_t T_l, int64_t width) {
  for_each_rank_row(positions, CP, B, T_l, ld, rank_stride, width,
                    [&](int64_t g, int64_t r) { std::copy_n(blocks + r, width, out + g); });
}

void cp_rows_from_global(float* blocks, int64_t rank_stride, const float* in, int64_t ld,
                         const int32_t* positions, int64_t CP, int64_t B, int64_t T_l, int64_t width) {
  for_each_rank_row(positions, CP, B, T_l, ld, rank_stride, width,
                    [&](int64_t g, int64_t r) { std::copy_n(in + g, width, blocks + r); });
}

void cp_columns_to_ranks(float* blocks, int64_t rank_stride, const float* in, int64_t ld, int64_t N,
                         int64_t CP, int64_t width) {
  for (int64_t rank = 0; rank < CP; ++rank)
    for (int64_t n = 0; n < N; ++n)
      std::copy_n(in + n * ld + rank * width, width, blocks + rank * rank_stride + n * width);
}

void cp_columns_from_ranks(float* out, int64_t ld, const float* blocks, int64_t rank_stride, int64_t N,
                           int64_t CP, int64_t width) {
  for (int64_t rank = 0; rank < CP; ++rank)
    for (int64_t n = 0; n < N; ++n)
      std::copy_n(blocks + rank * rank_stride + n * width, width, out + n * ld + rank * width);
}

}  // namespace tessel::cpu
