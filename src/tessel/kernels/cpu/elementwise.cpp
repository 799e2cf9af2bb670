// Elementwise kernels and reductions over flat buffers.
#include <algorithm>
#include <vector>

#include "tessel/kernels/cpu/dropout_factors.h"
#include "tessel/kernels/cpu/kernels.h"
#include "tessel/kernels/cpu/vec_math.h"

namespace tessel::cpu {

namespace {
// sum_squares splits the buffer into blocks of this many floats, whatever the thread count, and
// adds the block sums in order: the result depends on the data only.
constexpr int64_t kSumBlock = 1 << 16;
// Each block keeps this many independent double accumulators (one AVX-512 register's worth), so
// the loop vectorises without reassociating anything.
constexpr int kLanes = 8;

double block_sum_of_squares(const float* x, int64_t n) {
  double lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) lanes[l] += static_cast<double>(x[i + l]) * x[i + l];
  for (; i < n; ++i) lanes[0] += static_cast<double>(x[i]) * x[i];
  double sum = 0.0;
  for (int l = 0; l < kLanes; ++l) sum += lanes[l];
  return sum;
}
}  // namespace

void residual_forward(float* out, const float* a, const float* b, int64_t n) {
#pragma omp parallel for simd schedule(static) if (worth_parallel(n))
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

namespace {
// Calls apply(i0, n, m) for each piece of up to 256 features of every row of an (R, C) buffer:
// elements [i0, i0 + n) and their dropout factors m, drawn at once (dropout_factors.h) so that
// both the drawing and the arithmetic run in vector loops.
template <class Apply>
void for_each_dropout_piece(const DropoutSite& site, int64_t R, int64_t C, Apply apply) {
  constexpr int64_t kPiece = 256;
#pragma omp parallel for schedule(static) if (worth_parallel(R * C))
  for (int64_t r = 0; r < R; ++r) {
    float factors[kPiece];
    for (int64_t c0 = 0; c0 < C; c0 += kPiece) {
      const int64_t n = std::min(kPiece, C - c0);
      dropout_row_factors(factors, site, r, c0, n);
      apply(r * C + c0, n, factors);
    }
  }
}
}  // namespace

void dropout_add_forward(float* out, const float* a, const float* b, int64_t R, int64_t C,
                         const DropoutSite& site) {
  if (!site.active()) {
    if (a != nullptr) residual_forward(out, a, b, R * C);
    else if (out != b) std::copy_n(b, R * C, out);
    return;
  }
  for_each_dropout_piece(site, R, C, [&](int64_t i0, int64_t n, const float* m) {
    if (a != nullptr) {
#pragma omp simd
      for (int64_t i = i0; i < i0 + n; ++i) out[i] = a[i] + b[i] * m[i - i0];
    } else {
#pragma omp simd
      for (int64_t i = i0; i < i0 + n; ++i) out[i] = b[i] * m[i - i0];
    }
  });
}

void dropout_add_backward(float* db, const float* dout, int64_t R, int64_t C, const DropoutSite& site) {
  if (!site.active()) {
#pragma omp parallel for simd schedule(static) if (worth_parallel(R * C))
    for (int64_t i = 0; i < R * C; ++i) db[i] += dout[i];
    return;
  }
  for_each_dropout_piece(site, R, C, [&](int64_t i0, int64_t n, const float* m) {
#pragma omp simd
    for (int64_t i = i0; i < i0 + n; ++i) db[i] += dout[i] * m[i - i0];
  });
}

void scale(float* x, float factor, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] *= factor;
}

double sum_squares(const float* x, int64_t n, double sum) {
  const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  thread_local std::vector<double> block_sums;
  block_sums.resize(blocks);
  double* sums = block_sums.data();
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kSumBlock;
    sums[b] = block_sum_of_squares(x + begin, std::min(kSumBlock, n - begin));
  }
  for (int64_t b = 0; b < blocks; ++b) sum += sums[b];
  return sum;
}

int64_t find_out_of_range(const int32_t* ids, int64_t n, int32_t lo, int32_t hi) {
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < lo || ids[i] >= hi) return i;
  return -1;
}

}  // namespace tessel::cpu
