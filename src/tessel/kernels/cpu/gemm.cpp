#include "tessel/kernels/cpu/gemm.h"

#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/kernels/bf16.h"
#include "tessel/kernels/fp16.h"

namespace tessel::cpu {

namespace {
std::atomic<bool> stats_on{false};
std::atomic<int64_t> stats_flops{0}, stats_ns{0}, stats_calls{0};

// The (rows, cols) matrix at src (row stride ld), rounded by `round` (to bf16 or fp16), packed into
// dst (stride cols).
template <float (*round)(float)>
const float* rounded(std::vector<float>& dst, const float* src, int64_t rows, int64_t cols,
                     int64_t ld) {
  dst.resize(static_cast<size_t>(rows * cols));
  float* out = dst.data();
#pragma omp parallel for schedule(static) if (rows * cols > (int64_t{1} << 16))
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = round(src[r * ld + c]);
  return out;
}

// oneDNN 2.6's AVX2 sgemm runs up to twice as slow when B is not transposed, its rows lie a
// multiple of 2 KiB apart and 64 ≤ M ≤ 256: a weight gradient inpᵀ · dout with 512 output
// features, or attention's blocks of a fused QKV with 4096 features, measured 53–78 against
// 100–103 GFLOP/s with the same B at a stride off that multiple (bench/RESULTS.md). Such a B
// is copied to a padded stride first: K·N floats moved against the product's 2·M·N·K flops.
// The AVX-512 kernels lose 8–25 % on those strides, about what the copy costs there (gemm_bench
// --b-strides), so there B is used as it is.
bool b_stride_is_slow(bool trans_b, int64_t M, int64_t ldb) {
#if defined(__AVX512F__)
  (void)trans_b, (void)M, (void)ldb;
  return false;
#else
  return !trans_b && ldb % 512 == 0 && M >= 64 && M <= 256;
#endif
}

// B (K, N), row stride ldb, copied into the calling thread's scratch; returns the new stride.
int64_t restride(std::vector<float>& dst, const float* B, int64_t K, int64_t N, int64_t ldb) {
  const int64_t ld = N % 512 == 0 ? N + 16 : N;
  dst.resize(static_cast<size_t>(K * ld));
  for (int64_t k = 0; k < K; ++k) std::copy_n(B + k * ldb, N, dst.data() + k * ld);
  return ld;
}
}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  const bool timed = stats_on.load(std::memory_order_relaxed);
  const auto start = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  if (b_stride_is_slow(trans_b, M, ldb)) {
    thread_local std::vector<float> b_copy;
    ldb = restride(b_copy, B, K, N, ldb);
    B = b_copy.data();
  }
  dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda,
                                B, ldb, beta, C, ldc);
  TESSEL_CHECK(st == dnnl_success, "dnnl_sgemm failed (status {})", static_cast<int>(st));
  if (timed) {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::steady_clock::now() - start);
    stats_flops.fetch_add(2 * M * N * K, std::memory_order_relaxed);
    stats_ns.fetch_add(ns.count(), std::memory_order_relaxed);
    stats_calls.fetch_add(1, std::memory_order_relaxed);
  }
}

// gemm over operands rounded by `round`: the emulation of a GEMM on bf16 or fp16 inputs with fp32
// accumulation.
template <float (*round)(float)>
void gemm_rounded(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                  int64_t ldc) {
  if (M == 0 || N == 0) return;
  thread_local std::vector<float> a_rounded, b_rounded;
  // Stored shapes: op(A) (M, K) is A (K, M) when transposed, op(B) (K, N) is B (N, K).
  const int64_t a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;
  const int64_t b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
  gemm(trans_a, trans_b, M, N, K, alpha, rounded<round>(a_rounded, A, a_rows, a_cols, lda), a_cols,
       rounded<round>(b_rounded, B, b_rows, b_cols, ldb), b_cols, beta, C, ldc);
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
               int64_t ldc) {
  gemm_rounded<round_to_bf16>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_fp16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
               int64_t ldc) {
  gemm_rounded<round_to_fp16>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_stats_enable(bool on) { stats_on.store(on); }

GemmStats gemm_stats() {
  return {static_cast<double>(stats_flops.load()), stats_ns.load() * 1e-9, stats_calls.load()};
}

void gemm_stats_reset() {
  stats_flops = 0;
  stats_ns = 0;
  stats_calls = 0;
}

}  // namespace tessel::cpu
