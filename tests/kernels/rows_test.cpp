// Kernel cases: context parallelism's row movement — a rank's rows of whole sequences, K/V rows
// packed for the ring and their gradients added back, and the all-gather path's reorder between
// rank-major blocks and global positions — against the layouts their comments state.
#include <algorithm>

#include "kernels/harness.h"

namespace tessel::testing {
namespace {

// Rank r of CP holds chunks r and 2·CP−1−r of each sequence's 2·CP chunks (Megatron's causal
// load balance): its positions (CP, T_l) in that order.
Ints balanced_positions(int64_t CP, int64_t T_l) {
  const int64_t chunk = T_l / 2;
  Ints positions;
  for (int64_t r = 0; r < CP; ++r)
    for (int64_t c : {r, 2 * CP - 1 - r})
      for (int64_t i = 0; i < chunk; ++i) positions.push_back(static_cast<int32_t>(c * chunk + i));
  return positions;
}

void cp_take_rows(const Kernels& k) {
  const int64_t B = 2, CP = 2, T_l = 6, T = CP * T_l, width = 3;
  const Ints in = random_indices(B * T * width, 1000, 300);
  const Ints all = balanced_positions(CP, T_l);
  const IntBuffer d_in(k, in);
  for (int64_t rank = 0; rank < CP; ++rank) {
    const Ints positions(all.begin() + rank * T_l, all.begin() + (rank + 1) * T_l);
    const IntBuffer d_positions(k, positions);
    IntBuffer out(k, B * T_l * width, -1);
    k.cp_take_rows(out.data(), d_in.data(), d_positions.data(), B, T, T_l, width);
    Ints want;
    for (int64_t b = 0; b < B; ++b)
      for (int32_t p : positions)
        want.insert(want.end(), in.begin() + (b * T + p) * width,
                    in.begin() + (b * T + p + 1) * width);
    EXPECT_EQ(out.host(), want) << "rank " << rank;
  }
}

// K and V rows (with their strides; the padding is not theirs) packed as kv (2, N, width), and a
// packed gradient added back into dk and dv, padding untouched.
void cp_pack_and_unpack_add_kv(const Kernels& k) {
  const int64_t N = 7, width = 6, k_ld = 10, v_ld = 9;
  const Floats keys = random_floats(N * k_ld, 301), values = random_floats(N * v_ld, 302);
  const FloatBuffer d_keys(k, keys), d_values(k, values);
  FloatBuffer kv(k, 2 * N * width, 5.0f);
  k.cp_pack_kv(kv.data(), d_keys.data(), d_values.data(), N, width, k_ld, v_ld);
  Floats want;
  for (int64_t n = 0; n < N; ++n)
    want.insert(want.end(), keys.begin() + n * k_ld, keys.begin() + n * k_ld + width);
  for (int64_t n = 0; n < N; ++n)
    want.insert(want.end(), values.begin() + n * v_ld, values.begin() + n * v_ld + width);
  EXPECT_EQ(kv.host(), want);

  const Floats kv_grad = random_floats(2 * N * width, 303);
  const Floats dk0 = random_floats(N * k_ld, 304), dv0 = random_floats(N * v_ld, 305);
  const FloatBuffer d_kv_grad(k, kv_grad);
  FloatBuffer dk(k, dk0), dv(k, dv0);
  k.cp_unpack_add_kv(dk.data(), dv.data(), d_kv_grad.data(), N, width, k_ld, v_ld);
  Floats want_dk = dk0, want_dv = dv0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < width; ++j) {
      want_dk[n * k_ld + j] += kv_grad[n * width + j];
      want_dv[n * v_ld + j] += kv_grad[(N + n) * width + j];
    }
  EXPECT_EQ(dk.host(), want_dk);
  EXPECT_EQ(dv.host(), want_dv);
}

// CP ranks' blocks (B, T_l, width) at a stride of their own (padding between them), put at their
// global positions in rows (B, T) of stride ld, and back; the rows' other columns untouched.
void cp_rows_to_and_from_global(const Kernels& k) {
  const int64_t CP = 3, B = 2, T_l = 4, T = CP * T_l, width = 5, ld = 8, rank_stride = B * T_l * width + 3;
  const Ints positions = balanced_positions(CP, T_l);
  const Floats blocks = random_floats(CP * rank_stride, 306);
  const IntBuffer d_positions(k, positions);
  const FloatBuffer d_blocks(k, blocks);
  FloatBuffer global(k, B * T * ld, 7.0f);
  k.cp_rows_to_global(global.data(), ld, d_blocks.data(), rank_stride, d_positions.data(), CP, B, T_l, width);
  Floats want(B * T * ld, 7.0f);
  for (int64_t r = 0; r < CP; ++r)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T_l; ++t)
        std::copy_n(blocks.begin() + r * rank_stride + (b * T_l + t) * width, width,
                    want.begin() + (b * T + positions[r * T_l + t]) * ld);
  const Floats got = global.host();
  EXPECT_EQ(got, want);
  EXPECT_EQ(std::count(got.begin(), got.end(), 7.0f), B * T * (ld - width));  // every row's columns written

  FloatBuffer back(k, blocks.size(), 9.0f);
  k.cp_rows_from_global(back.data(), rank_stride, global.data(), ld, d_positions.data(), CP, B, T_l, width);
  Floats want_back(blocks.size(), 9.0f);
  for (int64_t r = 0; r < CP; ++r)
    std::copy_n(blocks.begin() + r * rank_stride, B * T_l * width, want_back.begin() + r * rank_stride);
  EXPECT_EQ(back.host(), want_back);
}

// Rows (N, ld) holding CP column blocks of width each (rank r's at r·width): each rank's block
// (N, width) at its stride, and back; the other columns untouched.
void cp_columns_to_and_from_ranks(const Kernels& k) {
  const int64_t CP = 3, N = 5, width = 4, ld = CP * width + 2, rank_stride = N * width + 1;
  const Floats rows = random_floats(N * ld, 307);
  const FloatBuffer d_rows(k, rows);
  FloatBuffer blocks(k, CP * rank_stride, 7.0f);
  k.cp_columns_to_ranks(blocks.data(), rank_stride, d_rows.data(), ld, N, CP, width);
  Floats want(CP * rank_stride, 7.0f);
  for (int64_t r = 0; r < CP; ++r)
    for (int64_t n = 0; n < N; ++n)
      std::copy_n(rows.begin() + n * ld + r * width, width, want.begin() + r * rank_stride + n * width);
  EXPECT_EQ(blocks.host(), want);

  FloatBuffer back(k, N * ld, 9.0f);
  k.cp_columns_from_ranks(back.data(), ld, blocks.data(), rank_stride, N, CP, width);
  Floats want_back = rows;
  for (int64_t n = 0; n < N; ++n)
    std::fill_n(want_back.begin() + n * ld + CP * width, ld - CP * width, 9.0f);
  EXPECT_EQ(back.host(), want_back);
}

const bool kRegistered = add_kernel_cases({
    {"cp_take_rows", {"cp_take_rows"}, cp_take_rows},
    {"cp_pack_and_unpack_add_kv", {"cp_pack_kv", "cp_unpack_add_kv"}, cp_pack_and_unpack_add_kv},
    {"cp_rows_to_and_from_global", {"cp_rows_to_global", "cp_rows_from_global"}, cp_rows_to_and_from_global},
    {"cp_columns_to_and_from_ranks", {"cp_columns_to_ranks", "cp_columns_from_ranks"},
     cp_columns_to_and_from_ranks},
});

}  // namespace
}  // namespace tessel::testing
