#include "tessel/kernels/cpu/gemm.h"

#include <oneapi/dnnl/dnnl.h>

#include "tessel/core/error.h"

namespace tessel::cpu {

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda,
                                B, ldb, beta, C, ldc);
  TESSEL_CHECK(st == dnnl_success, "dnnl_sgemm failed (status {})", static_cast<int>(st));
}

}  // namespace tessel::cpu
