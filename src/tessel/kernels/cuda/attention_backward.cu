// Scaled dot-product attention, backward, from the final (out, lse) of the attention over all key
// blocks, so that with a block of keys only this block's share comes out (cpu/kernels.h). As the
// CPU, with P = exp(scale·q·kᵀ − lse), dP = dout·vᵀ, D_t = Σ_d dout·out and dS = P ∘ (dP − D_t):
//   dq += scale · dS · k        one warp per query row, keys staged (dq_kernel)
//   dk += scale · dSᵀ · q       one warp per key row, queries of every head of its group staged
//   dv += Pᵀ · dout             (dkv_kernel)
// P is recomputed in both passes; every gradient element is written by one thread, in a fixed
// order: deterministic, no atomics.
#include "tessel/kernels/cuda/attention.cuh"
#include "tessel/kernels/cuda/kernels.h"

namespace tessel::cuda {

namespace {

// D_t = Σ_d dout·out per (b, h, t), one warp per row.
__global__ void out_dot_dout_kernel(float* row_dot, const float* out, const float* dout, int64_t B,
                                    int64_t T, int64_t H, int64_t D) {
  const int64_t r = warp_row();  // (b, h, t)
  if (r >= B * H * T) return;
  const int64_t b = r / (H * T), h = r / T % H, t = r % T;
  const float* o = out + (b * T + t) * H * D + h * D;
  const float* g = dout + (b * T + t) * H * D + h * D;
  float dot = 0.0f;
  for (int64_t d = lane_id(); d < D; d += kWarp) dot += o[d] * g[d];
  dot = warp_sum(dot);
  if (lane_id() == 0) row_dot[r] = dot;
}

// Block: query rows t0.. of head h, batch b. Shared: K and V tiles (kTileRows, D + 1), the
// block's q and dout rows (kRowsPerBlock, D) each.
__global__ void dq_kernel(float* dq, const float* dout, const float* q, const float* k,
                          const float* v, const float* lse, const float* row_dot, int64_t Tq,
                          int64_t Tk, int64_t H, int64_t G, int64_t D, int64_t q_ld, int64_t k_ld,
                          int64_t v_ld, Visibility visible) {
  extern __shared__ float shared[];
  float* k_tile = shared;                        // (kTileRows, D + 1)
  float* v_tile = k_tile + kTileRows * (D + 1);  // (kTileRows, D + 1)
  float* q_rows = v_tile + kTileRows * (D + 1);  // (kRowsPerBlock, D)
  float* g_rows = q_rows + kRowsPerBlock * D;    // (kRowsPerBlock, D)
  const int64_t b = blockIdx.z, h = blockIdx.y, g = h / (H / G);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t t0 = blockIdx.x * static_cast<int64_t>(kRowsPerBlock), t = t0 + warp;
  stage_block_rows(q_rows, q + b * Tq * q_ld + h * D, q_ld, t0, Tq, D);
  stage_block_rows(g_rows, dout + b * Tq * H * D + h * D, H * D, t0, Tq, D);
  const float row_lse = t < Tq ? lse[(b * H + h) * Tq + t] : -INFINITY;
  const bool row = row_lse != -INFINITY;  // a row that sees no key at all has no gradient
  const float row_d = row ? row_dot[(b * H + h) * Tq + t] : 0.0f;
  const float scale = 1.0f / sqrtf(static_cast<float>(D));
  const float* k_head = k + b * Tk * k_ld + g * D;
  const float* v_head = v + b * Tk * v_ld + g * D;
  const int64_t key_end = visible.by_index() ? min(Tk, t0 + kRowsPerBlock) : Tk;

  float acc[kColumnsPerLane] = {};
  for (int64_t s0 = 0; s0 < key_end; s0 += kTileRows) {
    __syncthreads();
    stage_tile(k_tile, k_head, k_ld, s0, Tk, D);
    stage_tile(v_tile, v_head, v_ld, s0, Tk, D);
    __syncthreads();
    const int64_t s = s0 + lane;
    const bool seen = row && s < Tk && visible(b, t, s);
    if (!__any_sync(0xffffffffu, seen)) continue;
    float ds = 0.0f;
    if (seen) {
      const float p =
          expf(scale * dot_row(q_rows + warp * D, k_tile + lane * (D + 1), D) - row_lse);
      const float dp = dot_row(g_rows + warp * D, v_tile + lane * (D + 1), D);
      ds = p * (dp - row_d);
    }
    accumulate_rows(acc, ds, k_tile, D);
  }
  if (!row) return;
  float* dq_row = dq + (b * Tq + t) * q_ld + h * D;
#pragma unroll
  for (int j = 0; j < kColumnsPerLane; ++j) {
    const int64_t d = lane + j * kWarp;
    if (d < D) dq_row[d] += scale * acc[j];
  }
}

// Block: key rows s0.. of kv head g, batch b. Shared: q and dout tiles (kTileRows, D + 1) of one
// query head, their lse and D_t (kTileRows) each, and the block's k and v rows (kRowsPerBlock, D).
__global__ void dkv_kernel(float* dk, float* dv, const float* dout, const float* q, const float* k,
                           const float* v, const float* lse, const float* row_dot, int64_t Tq,
                           int64_t Tk, int64_t H, int64_t G, int64_t D, int64_t q_ld, int64_t k_ld,
                           int64_t v_ld, Visibility visible) {
  extern __shared__ float shared[];
  float* q_tile = shared;                        // (kTileRows, D + 1)
  float* g_tile = q_tile + kTileRows * (D + 1);  // (kTileRows, D + 1)
  float* k_rows = g_tile + kTileRows * (D + 1);  // (kRowsPerBlock, D)
  float* v_rows = k_rows + kRowsPerBlock * D;    // (kRowsPerBlock, D)
  float* tile_lse = v_rows + kRowsPerBlock * D;  // (kTileRows)
  float* tile_dot = tile_lse + kTileRows;        // (kTileRows)
  const int64_t b = blockIdx.z, g = blockIdx.y, heads_per_group = H / G;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t first_key = blockIdx.x * static_cast<int64_t>(kRowsPerBlock), s = first_key + warp;
  stage_block_rows(k_rows, k + b * Tk * k_ld + g * D, k_ld, first_key, Tk, D);
  stage_block_rows(v_rows, v + b * Tk * v_ld + g * D, v_ld, first_key, Tk, D);
  const bool key = s < Tk;
  const float scale = 1.0f / sqrtf(static_cast<float>(D));
  // Causal by index: queries before the block's first key see none of its keys.
  const int64_t query_begin = visible.by_index() ? first_key / kTileRows * kTileRows : 0;

  float dk_acc[kColumnsPerLane] = {}, dv_acc[kColumnsPerLane] = {};
  for (int64_t h = g * heads_per_group; h < (g + 1) * heads_per_group; ++h) {
    const float* q_head = q + b * Tq * q_ld + h * D;
    const float* g_head = dout + b * Tq * H * D + h * D;
    for (int64_t t0 = query_begin; t0 < Tq; t0 += kTileRows) {
      __syncthreads();
      stage_tile(q_tile, q_head, q_ld, t0, Tq, D);
      stage_tile(g_tile, g_head, H * D, t0, Tq, D);
      if (threadIdx.x < kTileRows) {
        const int64_t t = t0 + threadIdx.x;
        tile_lse[threadIdx.x] = t < Tq ? lse[(b * H + h) * Tq + t] : -INFINITY;
        tile_dot[threadIdx.x] = t < Tq ? row_dot[(b * H + h) * Tq + t] : 0.0f;
      }
      __syncthreads();
      const int64_t t = t0 + lane;
      const bool seen = key && t < Tq && tile_lse[lane] != -INFINITY && visible(b, t, s);
      if (!__any_sync(0xffffffffu, seen)) continue;
      float p = 0.0f, ds = 0.0f;
      if (seen) {
        p = expf(scale * dot_row(q_tile + lane * (D + 1), k_rows + warp * D, D) - tile_lse[lane]);
        const float dp = dot_row(g_tile + lane * (D + 1), v_rows + warp * D, D);
        ds = p * (dp - tile_dot[lane]);
      }
      accumulate_rows(dv_acc, p, g_tile, D);
      accumulate_rows(dk_acc, ds, q_tile, D);
    }
  }
  if (!key) return;
#pragma unroll
  for (int j = 0; j < kColumnsPerLane; ++j) {
    const int64_t d = lane + j * kWarp;
    if (d >= D) continue;
    if (dk != nullptr) dk[(b * Tk + s) * k_ld + g * D + d] += scale * dk_acc[j];
    if (dv != nullptr) dv[(b * Tk + s) * v_ld + g * D + d] += dv_acc[j];
  }
}

CudaScratch row_dot_scratch;

void backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
              const float* v, const float* out, const float* lse, int64_t B, int64_t Tq, int64_t Tk,
              int64_t H, int64_t G, int64_t D, int64_t q_ld, int64_t k_ld, int64_t v_ld,
              Visibility visible) {
  if (B == 0 || Tq == 0 || Tk == 0) return;
  float* row_dot = row_dot_scratch.reserve<float>(B * H * Tq);  // (B, H, Tq)
  launch_rows("attention_backward", out_dot_dout_kernel, B * H * Tq, row_dot, out, dout, B, Tq, H,
              D);
  const size_t tiles = 2 * kTileRows * (D + 1), rows = 2 * kRowsPerBlock * D;
  if (dq != nullptr) {
    const size_t bytes = (tiles + rows) * sizeof(float);
    allow_shared_bytes(reinterpret_cast<const void*>(dq_kernel), bytes);
    const dim3 grid(static_cast<unsigned>((Tq + kRowsPerBlock - 1) / kRowsPerBlock),
                    static_cast<unsigned>(H), static_cast<unsigned>(B));
    launch("attention_backward (dq)", dq_kernel, grid, kThreads, bytes, dq, dout, q, k, v, lse,
           row_dot, Tq, Tk, H, G, D, q_ld, k_ld, v_ld, visible);
  }
  if (dk != nullptr || dv != nullptr) {
    const size_t bytes = (tiles + rows + 2 * kTileRows) * sizeof(float);
    allow_shared_bytes(reinterpret_cast<const void*>(dkv_kernel), bytes);
    const dim3 grid(static_cast<unsigned>((Tk + kRowsPerBlock - 1) / kRowsPerBlock),
                    static_cast<unsigned>(G), static_cast<unsigned>(B));
    launch("attention_backward (dk, dv)", dkv_kernel, grid, kThreads, bytes, dk, dv, dout, q, k, v,
           lse, row_dot, Tq, Tk, H, G, D, q_ld, k_ld, v_ld, visible);
  }
}

}  // namespace

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                        const float* k, const float* v, const float* out, const float* lse,
                        int64_t B, int64_t T, int64_t H, int64_t G, int64_t D, int64_t q_ld,
                        int64_t k_ld, int64_t v_ld, bool causal, const DropoutSite& dropout) {
  refuse_dropout("attention_backward", dropout);
  check_attention_args("attention_backward", B, T, T, H, G, D, q_ld, k_ld, v_ld);
  backward(dq, dk, dv, dout, q, k, v, out, lse, B, T, T, H, G, D, q_ld, k_ld, v_ld,
           Visibility{nullptr, nullptr, causal});
}

void attention_block_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                              const float* k, const float* v, const float* out, const float* lse,
                              int64_t B, int64_t Tq, int64_t Tk, int64_t H, int64_t G, int64_t D,
                              int64_t q_ld, int64_t k_ld, int64_t v_ld, const int32_t* q_pos,
                              const int32_t* k_pos, const int32_t* key_start, const DropoutSite& dropout) {
  refuse_dropout("attention_block_backward", dropout);
  backward(dq, dk, dv, dout, q, k, v, out, lse, B, Tq, Tk, H, G, D, q_ld, k_ld, v_ld,
           block_visibility("attention_block_backward", B, Tq, Tk, H, G, D, q_ld, k_ld, v_ld,
                            q_pos, k_pos, key_start));
}

}  // namespace tessel::cuda
