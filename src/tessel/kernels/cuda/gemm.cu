// Row-major GEMM through cuBLASLt: C = alpha · op(A) · op(B) + beta · C (cpu/gemm.h's contract).
//
// cuBLASLt is column-major, and a row-major (M, N) matrix is the column-major (N, M) matrix of its
// transpose, so C = op(A)·op(B) runs as Cᵀ = op(B)ᵀ·op(A)ᵀ: B in the first operand's place, A in
// the second's, m = N, n = M. fp32 in and out, fp32 arithmetic (CUBLAS_COMPUTE_32F: no TF32, so
// results stay within fp32 rounding of the CPU's).
//
// Each distinct call shape gets a plan once — descriptors, layouts and the heuristic's algorithm
// — kept in a map, so a training step, which repeats the same few shapes, pays for no query after
// its first. The key holds the operand types: bf16 or fp16 operands with fp32 accumulation (mixed
// precision) are a plan with CUDA_R_16BF or CUDA_R_16F inputs and the same compute type, through
// this path.
//
// cuBLASLt is opened on the first GEMM rather than linked: its initialisers cost every process
// that links it half a second and 200 MB at start, CPU-only runs and every test process included.
#include <cublasLt.h>
#include <dlfcn.h>

#include <array>
#include <map>
#include <utility>
#include <vector>

#include "tessel/kernels/bf16.h"
#include "tessel/kernels/fp16.h"
#include "tessel/kernels/cuda/device.cuh"
#include "tessel/kernels/cuda/kernels.h"

namespace tessel::cuda {

namespace {

// Hopper's cuBLASLt kernels want up to 32 MiB of workspace for their split-K and stream-K paths.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

#define TESSEL_STRINGIFY(x) #x
#define TESSEL_SONAME(major) "libcublasLt.so." TESSEL_STRINGIFY(major)

// The cuBLASLt functions this file calls, resolved from the library at first use.
struct LtApi {
// clang-format off
#define TESSEL_LT_FUNCTIONS(X)                                                                \
  X(cublasLtCreate) X(cublasLtGetStatusString) X(cublasLtMatrixLayoutCreate)                  \
  X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescSetAttribute)                               \
  X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceSetAttribute)                   \
  X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul)
// clang-format on
#define TESSEL_LT_POINTER(name) decltype(&::name) name = nullptr;
  TESSEL_LT_FUNCTIONS(TESSEL_LT_POINTER)
#undef TESSEL_LT_POINTER
};

const LtApi& lt() {
  static const LtApi api = [] {
    // The soname first (LD_LIBRARY_PATH, the loader's cache), then the toolkit built against.
    void* lib = dlopen(TESSEL_SONAME(CUBLAS_VER_MAJOR), RTLD_NOW | RTLD_LOCAL);
#ifdef TESSEL_CUDA_LIBRARY_DIR
    if (lib == nullptr)
      lib = dlopen(TESSEL_CUDA_LIBRARY_DIR "/" TESSEL_SONAME(CUBLAS_VER_MAJOR),
                   RTLD_NOW | RTLD_LOCAL);
#endif
    if (lib == nullptr) cuda_fail("gemm: opening cuBLASLt", dlerror());
    LtApi loaded;
#define TESSEL_LT_RESOLVE(name)                                         \
  loaded.name = reinterpret_cast<decltype(&::name)>(dlsym(lib, #name)); \
  if (loaded.name == nullptr) cuda_fail("gemm: cuBLASLt lacks " #name, dlerror());
    TESSEL_LT_FUNCTIONS(TESSEL_LT_RESOLVE)
#undef TESSEL_LT_RESOLVE
    return loaded;
  }();
  return api;
}

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) cuda_fail(what, lt().cublasLtGetStatusString(status));
}

struct Blas {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
};

Blas& blas() {
  static Blas b = [] {
    Blas made;
    cuda_stream();  // selects the device first
    check(lt().cublasLtCreate(&made.handle), "cublasLtCreate");
    made.workspace = cuda_memory().alloc(kWorkspaceBytes);
    return made;
  }();
  return b;
}

// The largest power of two (up to 256) dividing the address: algorithms that need more are
// excluded for operands carved out of a larger buffer at an odd offset.
int64_t alignment(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  return address == 0 ? 256
                      : std::min<int64_t>(256, static_cast<int64_t>(address & (~address + 1)));
}

// trans_a, trans_b, M, N, K, lda, ldb, ldc, the three alignments, operand and result types.
using PlanKey = std::array<int64_t, 13>;

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, result = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

cublasLtMatrixLayout_t layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld) {
  cublasLtMatrixLayout_t l = nullptr;
  check(lt().cublasLtMatrixLayoutCreate(&l, type, rows, cols, ld), "cublasLtMatrixLayoutCreate");
  return l;
}

template <typename T>
void set_preference(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                    T value) {
  check(lt().cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)),
        "cublasLtMatmulPreferenceSetAttribute");
}

Plan make_plan(const PlanKey& key) {
  const bool trans_a = key[0] != 0, trans_b = key[1] != 0;
  const int64_t M = key[2], N = key[3], K = key[4], lda = key[5], ldb = key[6], ldc = key[7];
  const auto operand_type = static_cast<cudaDataType_t>(key[11]);
  const auto result_type = static_cast<cudaDataType_t>(key[12]);
  Plan plan;
  check(lt().cublasLtMatmulDescCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
        "cublasLtMatmulDescCreate");
  const cublasOperation_t first_op = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;   // B's place
  const cublasOperation_t second_op = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // A's place
  check(lt().cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &first_op,
                                            sizeof(first_op)),
        "cublasLtMatmulDescSetAttribute");
  check(lt().cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &second_op,
                                            sizeof(second_op)),
        "cublasLtMatmulDescSetAttribute");
  // Column-major views of the row-major operands (rows, cols, ld).
  plan.first = trans_b ? layout(operand_type, K, N, ldb) : layout(operand_type, N, K, ldb);
  plan.second = trans_a ? layout(operand_type, M, K, lda) : layout(operand_type, K, M, lda);
  plan.result = layout(result_type, N, M, ldc);

  cublasLtMatmulPreference_t pref = nullptr;
  check(lt().cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  set_preference(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t{kWorkspaceBytes});
  set_preference(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, static_cast<uint32_t>(key[9]));
  set_preference(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, static_cast<uint32_t>(key[8]));
  set_preference(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, static_cast<uint32_t>(key[10]));
  set_preference(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, static_cast<uint32_t>(key[10]));
  cublasLtMatmulHeuristicResult_t found{};
  int count = 0;
  check(lt().cublasLtMatmulAlgoGetHeuristic(blas().handle, plan.op, plan.first, plan.second,
                                            plan.result, plan.result, pref, 1, &found, &count),
        "cublasLtMatmulAlgoGetHeuristic");
  lt().cublasLtMatmulPreferenceDestroy(pref);
  if (count == 0) cuda_fail("gemm", "cuBLASLt has no algorithm for this shape and alignment");
  plan.algo = found.algo;
  return plan;
}

const Plan& plan_for(const PlanKey& key) {
  static std::map<PlanKey, Plan> plans;
  auto it = plans.find(key);
  if (it == plans.end()) it = plans.emplace(key, make_plan(key)).first;
  return it->second;
}

// C (M, N) *= beta, the whole product when K = 0; beta = 0 writes zeros (C is not read, as BLAS).
__global__ void scale_matrix_kernel(float* C, int64_t M, int64_t N, int64_t ldc, float beta) {
  TESSEL_GRID_LOOP(i, M * N) {
    float* c = C + (i / N) * ldc + i % N;
    *c = beta == 0.0f ? 0.0f : beta * *c;
  }
}

// Accounting (gemm_stats_enable): an event pair around every call, resolved when read.
struct Stats {
  bool on = false;
  GemmStats totals;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> pending, spare;
};
Stats stats;

cudaEvent_t take_event() {
  cudaEvent_t e = nullptr;
  cuda_check(cudaEventCreate(&e), "cudaEventCreate");
  return e;
}

void resolve_pending() {
  for (auto& [start, stop] : stats.pending) {
    cuda_check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0.0f;
    cuda_check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    stats.totals.seconds += ms * 1e-3;
    stats.spare.emplace_back(start, stop);
  }
  stats.pending.clear();
}

}  // namespace

namespace {

// One cuBLASLt matmul of operands of the given type (fp32, bf16 or fp16) into fp32 C.
void matmul(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
            const void* A, int64_t lda, const void* B, int64_t ldb, float beta, float* C,
            int64_t ldc, cudaDataType_t operand_type) {
  const PlanKey key{
      trans_a,      trans_b,      M,            N,         K, lda, ldb, ldc, alignment(A),
      alignment(B), alignment(C), operand_type, CUDA_R_32F};
  const Plan& plan = plan_for(key);
  cudaStream_t stream = cuda_stream();
  std::pair<cudaEvent_t, cudaEvent_t> timing{};
  if (stats.on) {
    if (stats.spare.empty()) stats.spare.emplace_back(take_event(), take_event());
    timing = stats.spare.back();
    stats.spare.pop_back();
    cuda_check(cudaEventRecord(timing.first, stream), "cudaEventRecord");
  }
  check(lt().cublasLtMatmul(blas().handle, plan.op, &alpha, B, plan.first, A, plan.second, &beta, C,
                            plan.result, C, plan.result, &plan.algo, blas().workspace,
                            kWorkspaceBytes, stream),
        "cublasLtMatmul");
  if (stats.on) {
    cuda_check(cudaEventRecord(timing.second, stream), "cudaEventRecord");
    stats.pending.push_back(timing);
    stats.totals.flops += 2.0 * M * N * K;
    ++stats.totals.calls;
    if (stats.pending.size() >= 4096) resolve_pending();  // bounded, even if never read
  }
}

// C = beta · C when the product is empty (K = 0); true when nothing else is left to do.
bool empty_product(int64_t M, int64_t N, int64_t K, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return true;
  if (K != 0) return false;
  if (beta != 1.0f) launch_n("gemm (K = 0)", scale_matrix_kernel, M * N, C, M, N, ldc, beta);
  return true;
}

// x as cuBLASLt's 16-bit `type` encodes it: bf16 or fp16, to nearest, ties to even (kernels/bf16.h,
// kernels/fp16.h).
template <cudaDataType_t type>
__device__ uint16_t encoded(float x) {
  static_assert(type == CUDA_R_16BF || type == CUDA_R_16F);
  return type == CUDA_R_16F ? fp16_bits(x) : bf16_bits(x);
}

// (rows, cols) at src (row stride ld) encoded as `type`, packed into dst (stride cols).
template <cudaDataType_t type>
__global__ void to_16_bits_kernel(uint16_t* dst, const float* src, int64_t rows, int64_t cols,
                                  int64_t ld) {
  TESSEL_GRID_LOOP(i, rows * cols) dst[i] = encoded<type>(src[(i / cols) * ld + i % cols]);
}

template <cudaDataType_t type>
const uint16_t* to_16_bits(CudaScratch& scratch, const float* src, int64_t rows, int64_t cols,
                           int64_t ld) {
  uint16_t* dst = scratch.reserve<uint16_t>(rows * cols);
  launch_n("gemm (rounding)", to_16_bits_kernel<type>, rows * cols, dst, src, rows, cols, ld);
  return dst;
}

CudaScratch a_16_bits, b_16_bits;

// gemm over operands rounded to `type` (bf16 or fp16 inputs), fp32 accumulation and C.
template <cudaDataType_t type>
void gemm_16_bits(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                  int64_t ldc) {
  if (empty_product(M, N, K, beta, C, ldc)) return;
  // Stored shapes: op(A) (M, K) is A (K, M) when transposed, op(B) (K, N) is B (N, K).
  const int64_t a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;
  const int64_t b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
  matmul(trans_a, trans_b, M, N, K, alpha, to_16_bits<type>(a_16_bits, A, a_rows, a_cols, lda), a_cols,
         to_16_bits<type>(b_16_bits, B, b_rows, b_cols, ldb), b_cols, beta, C, ldc, type);
}

}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (empty_product(M, N, K, beta, C, ldc)) return;
  matmul(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, CUDA_R_32F);
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
               int64_t ldc) {
  gemm_16_bits<CUDA_R_16BF>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_fp16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
               int64_t ldc) {
  gemm_16_bits<CUDA_R_16F>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_stats_enable(bool on) { stats.on = on; }

GemmStats gemm_stats() {
  resolve_pending();
  return stats.totals;
}

void gemm_stats_reset() {
  resolve_pending();
  stats.totals = {};
}

}  // namespace tessel::cuda
