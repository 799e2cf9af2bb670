#include "tessel/kernels/cpu/gemm.h"

#include <oneapi/dnnl/dnnl.h>

#include <atomic>
#include <chrono>

#include "tessel/core/error.h"

namespace tessel::cpu {

namespace {
std::atomic<bool> stats_on{false};
std::atomic<int64_t> stats_flops{0}, stats_ns{0}, stats_calls{0};
}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  const bool timed = stats_on.load(std::memory_order_relaxed);
  const auto start = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
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
