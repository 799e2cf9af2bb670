// Scaled dot-product attention, forward (grouped-query heads, the CPU's block interface for
// context parallelism) and the log-sum-exp merge of partial results. attention.cuh says how the
// kernels are laid out; attention_backward.cu has the backward.
#include <cmath>
#include <cstdio>

#include "tessel/kernels/cuda/attention.cuh"
#include "tessel/kernels/cuda/kernels.h"

namespace tessel::cuda {

void check_attention_args(const char* which, int64_t B, int64_t Tq, int64_t Tk, int64_t H,
                          int64_t G, int64_t D, int64_t q_ld, int64_t k_ld, int64_t v_ld) {
  char message[256];
  if (B < 0 || Tq < 0 || Tk < 0 || D <= 0 || H <= 0 || G <= 0 || H % G != 0) {
    std::snprintf(message, sizeof(message),
                  "bad sizes B=%ld Tq=%ld Tk=%ld D=%ld, or %ld query heads cannot share %ld kv "
                  "heads evenly",
                  long(B), long(Tq), long(Tk), long(D), long(H), long(G));
    cuda_fail(which, message);
  }
  if (q_ld < H * D || k_ld < G * D || v_ld < G * D) {
    std::snprintf(message, sizeof(message),
                  "row strides q_ld=%ld k_ld=%ld v_ld=%ld are shorter than the heads they hold",
                  long(q_ld), long(k_ld), long(v_ld));
    cuda_fail(which, message);
  }
  if (D > kMaxHeadDim || H > 65535 || B > 65535) {
    std::snprintf(message, sizeof(message),
                  "head size %ld, %ld heads or batch %ld beyond these kernels' limits (head size "
                  "%d, 65535 heads and batch)",
                  long(D), long(H), long(B), kMaxHeadDim);
    cuda_fail(which, message);
  }
}

Visibility block_visibility(const char* which, int64_t B, int64_t Tq, int64_t Tk, int64_t H,
                            int64_t G, int64_t D, int64_t q_ld, int64_t k_ld, int64_t v_ld,
                            const int32_t* q_pos, const int32_t* k_pos, const int32_t* key_start) {
  check_attention_args(which, B, Tq, Tk, H, G, D, q_ld, k_ld, v_ld);
  if (q_pos == nullptr || k_pos == nullptr)
    cuda_fail(which, "query and key positions are required");
  return Visibility{q_pos, k_pos, true, key_start, Tq};
}

void allow_shared_bytes(const void* kernel, size_t bytes) {
  if (bytes > (size_t{48} << 10))
    cuda_check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(bytes)),
               "cudaFuncSetAttribute (attention shared memory)");
}

namespace {

// Block (query rows t0..t0+kRowsPerBlock of head h, batch b): shared memory holds the K and V
// tiles (kTileRows, D + 1) and the block's q rows (kRowsPerBlock, D).
__global__ void attention_forward_kernel(float* out, float* lse, const float* q, const float* k,
                                         const float* v, int64_t Tq, int64_t Tk, int64_t H,
                                         int64_t G, int64_t D, int64_t q_ld, int64_t k_ld,
                                         int64_t v_ld, Visibility visible) {
  extern __shared__ float shared[];
  float* k_tile = shared;                        // (kTileRows, D + 1)
  float* v_tile = k_tile + kTileRows * (D + 1);  // (kTileRows, D + 1)
  float* q_rows = v_tile + kTileRows * (D + 1);  // (kRowsPerBlock, D)
  const int64_t b = blockIdx.z, h = blockIdx.y, g = h / (H / G);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t t0 = blockIdx.x * static_cast<int64_t>(kRowsPerBlock), t = t0 + warp;
  const bool row = t < Tq;
  const float scale = 1.0f / sqrtf(static_cast<float>(D));
  stage_block_rows(q_rows, q + b * Tq * q_ld + h * D, q_ld, t0, Tq, D);
  const float* q_row = q_rows + warp * D;
  const float* k_head = k + b * Tk * k_ld + g * D;  // (Tk, D), stride k_ld
  const float* v_head = v + b * Tk * v_ld + g * D;  // (Tk, D), stride v_ld
  // Causal by index: no key past the block's last row is visible.
  const int64_t key_end = visible.by_index() ? min(Tk, t0 + kRowsPerBlock) : Tk;

  float m = -INFINITY, l = 0.0f;  // running max and Σ exp(score - m)
  float acc[kColumnsPerLane] = {};
  for (int64_t s0 = 0; s0 < key_end; s0 += kTileRows) {
    __syncthreads();  // the previous tiles are used up (and q_rows written, the first time)
    stage_tile(k_tile, k_head, k_ld, s0, Tk, D);
    stage_tile(v_tile, v_head, v_ld, s0, Tk, D);
    __syncthreads();
    const int64_t s = s0 + lane;
    const bool seen = row && s < Tk && visible(b, t, s);
    const float score = seen ? scale * dot_row(q_row, k_tile + lane * (D + 1), D) : -INFINITY;
    const float tile_max = warp_max(score);
    if (tile_max == -INFINITY) continue;  // this row sees no key of the tile (whole warp)
    const float new_m = fmaxf(m, tile_max);
    const float correction = expf(m - new_m);  // 0 while m is still -inf
    const float p = seen ? expf(score - new_m) : 0.0f;
    l = l * correction + warp_sum(p);
#pragma unroll
    for (int j = 0; j < kColumnsPerLane; ++j) acc[j] *= correction;
    accumulate_rows(acc, p, v_tile, D);
    m = new_m;
  }
  if (!row) return;
  float* out_row = out + (b * Tq + t) * H * D + h * D;
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;  // a row that sees no key: out = 0, lse = -inf
#pragma unroll
  for (int j = 0; j < kColumnsPerLane; ++j) {
    const int64_t d = lane + j * kWarp;
    if (d < D) out_row[d] = acc[j] * inv;
  }
  if (lane == 0) lse[(b * H + h) * Tq + t] = l > 0.0f ? m + logf(l) : -INFINITY;
}

// The weights in double from the difference of the two lse, as the CPU merges.
__global__ void merge_kernel(float* out, float* lse, const float* block_out, const float* block_lse,
                             int64_t B, int64_t T, int64_t H, int64_t D) {
  TESSEL_GRID_LOOP(i, B * H * T * D) {
    const int64_t d = i % D, r = i / D;  // r = (b, h, t)
    const int64_t b = r / (H * T), h = r / T % H, t = r % T;
    const float theirs = block_lse[r];
    if (theirs == -INFINITY) continue;
    float* o = out + (b * T + t) * H * D + h * D + d;
    const float block_value = block_out[(b * T + t) * H * D + h * D + d];
    const float ours = lse[r];
    if (ours == -INFINITY) {
      *o = block_value;
      continue;
    }
    const double diff = static_cast<double>(theirs) - ours;
    const double small = exp(-fabs(diff));
    const double ours_weight = diff > 0 ? small / (1 + small) : 1 / (1 + small);
    const double theirs_weight = diff > 0 ? 1 / (1 + small) : small / (1 + small);
    *o = static_cast<float>(ours_weight * *o + theirs_weight * block_value);
  }
}

// After merge_kernel (which reads the old lse): lse' = max + log1p(e^-|diff|).
__global__ void merge_lse_kernel(float* lse, const float* block_lse, int64_t rows) {
  TESSEL_GRID_LOOP(r, rows) {
    const float theirs = block_lse[r], ours = lse[r];
    if (theirs == -INFINITY) continue;
    if (ours == -INFINITY) {
      lse[r] = theirs;
      continue;
    }
    const double diff = static_cast<double>(theirs) - ours;
    lse[r] = static_cast<float>(fmax(static_cast<double>(ours), static_cast<double>(theirs)) +
                                log1p(exp(-fabs(diff))));
  }
}

void forward(float* out, float* lse, const float* q, const float* k, const float* v, int64_t B,
             int64_t Tq, int64_t Tk, int64_t H, int64_t G, int64_t D, int64_t q_ld, int64_t k_ld,
             int64_t v_ld, Visibility visible) {
  if (B == 0 || Tq == 0) return;
  const size_t shared_bytes = (2 * kTileRows * (D + 1) + kRowsPerBlock * D) * sizeof(float);
  allow_shared_bytes(reinterpret_cast<const void*>(attention_forward_kernel), shared_bytes);
  const dim3 grid(static_cast<unsigned>((Tq + kRowsPerBlock - 1) / kRowsPerBlock),
                  static_cast<unsigned>(H), static_cast<unsigned>(B));
  launch("attention_forward", attention_forward_kernel, grid, kThreads, shared_bytes, out, lse, q,
         k, v, Tq, Tk, H, G, D, q_ld, k_ld, v_ld, visible);
}

}  // namespace

void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       int64_t B, int64_t T, int64_t H, int64_t G, int64_t D, int64_t q_ld,
                       int64_t k_ld, int64_t v_ld, bool causal, const DropoutSite& dropout) {
  refuse_dropout("attention_forward", dropout);
  check_attention_args("attention_forward", B, T, T, H, G, D, q_ld, k_ld, v_ld);
  forward(out, lse, q, k, v, B, T, T, H, G, D, q_ld, k_ld, v_ld,
          Visibility{nullptr, nullptr, causal});
}

void attention_block_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                             int64_t B, int64_t Tq, int64_t Tk, int64_t H, int64_t G, int64_t D,
                             int64_t q_ld, int64_t k_ld, int64_t v_ld, const int32_t* q_pos,
                             const int32_t* k_pos, const int32_t* key_start, const DropoutSite& dropout) {
  refuse_dropout("attention_block_forward", dropout);
  forward(out, lse, q, k, v, B, Tq, Tk, H, G, D, q_ld, k_ld, v_ld,
          block_visibility("attention_block_forward", B, Tq, Tk, H, G, D, q_ld, k_ld, v_ld, q_pos,
                           k_pos, key_start));
}

void attention_merge(float* out, float* lse, const float* block_out, const float* block_lse,
                     int64_t B, int64_t T, int64_t H, int64_t D) {
  if (B < 0 || T < 0 || H <= 0 || D <= 0) cuda_fail("attention_merge", "bad sizes");
  launch_n("attention_merge", merge_kernel, B * H * T * D, out, lse, block_out, block_lse, B, T, H,
           D);
  launch_n("attention_merge", merge_lse_kernel, B * H * T, lse, block_lse, B * H * T);
}

}  // namespace tessel::cuda
