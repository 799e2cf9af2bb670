// Scaled dot-product attention (grouped-query heads), flash-attention style: the forward saves
// only lse = log Σ exp(scores) per query row, and the backward recomputes the probabilities from
// (q, k, v, out, lse, dout). Context parallelism relies on that: ring attention runs the same
// math on blocks of keys and merges partial results by their lse.
//
// Work is cut into blocks of kQueryRows query rows of one head. For such a block the scores
// against every visible key come from one gemm (causal: keys up to the block's last row only, so
// blocks above the diagonal are never computed; the triangle inside the diagonal block is masked),
// the softmax runs per row in a thread-local scratch, and P·V is a second gemm. The backward
// follows the same blocks with five gemms each. Results are deterministic for a given thread
// count: no task's result depends on which thread runs it or when.
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "tessel/core/error.h"
#include "tessel/kernels/cpu/gemm.h"
#include "tessel/kernels/cpu/kernels.h"
#include "tessel/kernels/cpu/vec_math.h"

namespace tessel::cpu {

namespace {

// Query rows per block: large enough for the gemms to run near peak, small enough that the
// causal diagonal block (half of it masked) wastes little and the scores stay in L2. 64 measured
// faster than 32 and 128 for T = 128…1024, D = 32…128.
constexpr int64_t kQueryRows = 64;

// Vector width in floats (AVX-512); score rows are padded to a multiple of it.
constexpr int64_t kLanes = 16;

// Written as this exact select, the max reduction compiles to vmaxps (std::max does not).
float row_max(const float* row, int64_t n) {
  float max = -INFINITY;
#pragma omp simd reduction(max : max)
  for (int64_t s = 0; s < n; ++s) max = max > row[s] ? max : row[s];
  return max;
}

// The per-thread work space, grown on first use and kept: no allocation in later calls.
struct AttentionScratch {
  std::vector<float> probs;       // (kQueryRows, ld): scores, then probabilities
  std::vector<float> dprobs;      // (kQueryRows, ld): dP, then dS (backward)
  std::vector<float> row_values;  // (kQueryRows): 1/Σ (forward) or Σ_d dout·out (backward)
};

AttentionScratch& attention_scratch(int64_t ld) {
  thread_local AttentionScratch scratch;
  const size_t n = static_cast<size_t>(kQueryRows * ld);
  if (scratch.probs.size() < n) {
    scratch.probs.resize(n);
    scratch.dprobs.resize(n);
    scratch.row_values.resize(kQueryRows);
  }
  return scratch;
}

// n rounded up to whole vectors; also the row stride of a score block.
int64_t padded(int64_t n) { return (n + kLanes - 1) / kLanes * kLanes; }

void check_attention_args(const char* which, int64_t B, int64_t T, int64_t H, int64_t G, int64_t D,
                          int64_t q_ld, int64_t k_ld, int64_t v_ld) {
  TESSEL_CHECK(B >= 0 && T >= 0 && D > 0, "attention.cpp: {}: bad sizes B={} T={} D={}", which, B,
               T, D);
  TESSEL_CHECK(H > 0 && G > 0 && H % G == 0,
               "attention.cpp: {}: {} query heads cannot share {} kv heads evenly", which, H, G);
  TESSEL_CHECK(q_ld >= H * D && k_ld >= G * D && v_ld >= G * D,
               "attention.cpp: {}: row strides q_ld={} k_ld={} v_ld={} are shorter than the heads "
               "they hold (H·D={}, G·D={})",
               which, q_ld, k_ld, v_ld, H * D, G * D);
}

}  // namespace

void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       int64_t B, int64_t T, int64_t H, int64_t G, int64_t D, int64_t q_ld,
                       int64_t k_ld, int64_t v_ld, bool causal) {
  check_attention_args("attention_forward", B, T, H, G, D, q_ld, k_ld, v_ld);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int64_t heads_per_group = H / G;
  const int64_t out_ld = H * D;
  const int64_t blocks = (T + kQueryRows - 1) / kQueryRows;
  const int64_t tasks = B * H * blocks;

  // Tasks are independent (each writes its own rows of out and lse), so dynamic scheduling keeps
  // results deterministic. The last query blocks, the heaviest when causal, go first.
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t block = blocks - 1 - task / (B * H);
    const int64_t b = task % (B * H) / H;
    const int64_t h = task % H;
    const int64_t g = h / heads_per_group;
    const int64_t t0 = block * kQueryRows;
    const int64_t rows = std::min(kQueryRows, T - t0);
    const int64_t keys = causal ? t0 + rows : T;
    const int64_t ld = padded(keys);
    AttentionScratch& scratch = attention_scratch(padded(T));
    float* probs = scratch.probs.data();         // (rows, ld)
    float* inv_sum = scratch.row_values.data();  // (rows)

    const float* q_block = q + (b * T + t0) * q_ld + h * D;  // (rows, D), stride q_ld
    const float* k_head = k + b * T * k_ld + g * D;          // (keys, D), stride k_ld
    const float* v_head = v + b * T * v_ld + g * D;          // (keys, D), stride v_ld
    float* out_block = out + (b * T + t0) * out_ld + h * D;  // (rows, D), stride H·D
    float* lse_block = lse + (b * H + h) * T + t0;           // (rows)

    // scores = scale · q kᵀ
    gemm(false, true, rows, keys, D, scale, q_block, q_ld, k_head, k_ld, 0.0f, probs, ld);
    // P = exp(scores - row max). Each row is worked on in whole vectors up to `span`, its masked
    // keys there set to -inf (so exp gives 0); those beyond `span` (up to ld) to 0.
    for (int64_t r = 0; r < rows; ++r) {
      float* row = probs + r * ld;
      const int64_t visible = causal ? t0 + r + 1 : keys;
      const int64_t span = padded(visible);
      std::fill(row + visible, row + span, -INFINITY);
      const float max = row_max(row, span);
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int64_t s = 0; s < span; ++s) {
        row[s] = exp_approx(row[s] - max);
        sum += row[s];
      }
      std::fill(row + span, row + ld, 0.0f);
      lse_block[r] = max + std::log(sum);
      inv_sum[r] = 1.0f / sum;
    }
    // out = (unnormalised P) · v, then each row divided by its sum
    gemm(false, false, rows, D, keys, 1.0f, probs, ld, v_head, v_ld, 0.0f, out_block, out_ld);
    for (int64_t r = 0; r < rows; ++r) {
      float* out_row = out_block + r * out_ld;
#pragma omp simd
      for (int64_t d = 0; d < D; ++d) out_row[d] *= inv_sum[r];
    }
  }
}

namespace {

// Where backward work adds its dk and dv: rows (T, D) of one kv head, with their strides. Either
// the gradients themselves or a partial sum private to one task.
struct KvGrads {
  float* dk;
  float* dv;
  int64_t dk_ld;
  int64_t dv_ld;
};

// The backward of query block `block` (kQueryRows rows) of query head h in batch b: its dq rows
// += ..., and kv.dk, kv.dv (query head h's kv head) += ... .
void backward_query_block(float* dq, KvGrads kv, const float* dout, const float* q, const float* k,
                          const float* v, const float* out, const float* lse, int64_t b, int64_t h,
                          int64_t block, int64_t T, int64_t H, int64_t G, int64_t D, int64_t q_ld,
                          int64_t k_ld, int64_t v_ld, bool causal) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int64_t g = h / (H / G);
  const int64_t out_ld = H * D;
  const int64_t t0 = block * kQueryRows;
  const int64_t rows = std::min(kQueryRows, T - t0);
  const int64_t keys = causal ? t0 + rows : T;
  const int64_t ld = padded(keys);
  AttentionScratch& scratch = attention_scratch(padded(T));
  float* probs = scratch.probs.data();              // (rows, ld)
  float* dprobs = scratch.dprobs.data();            // (rows, ld)
  float* out_dot_dout = scratch.row_values.data();  // (rows)

  const float* q_block = q + (b * T + t0) * q_ld + h * D;          // (rows, D), stride q_ld
  const float* k_head = k + b * T * k_ld + g * D;                  // (keys, D), stride k_ld
  const float* v_head = v + b * T * v_ld + g * D;                  // (keys, D), stride v_ld
  const float* out_block = out + (b * T + t0) * out_ld + h * D;    // (rows, D), stride H·D
  const float* dout_block = dout + (b * T + t0) * out_ld + h * D;  // (rows, D), stride H·D
  const float* lse_block = lse + (b * H + h) * T + t0;             // (rows)

  // D_t = Σ_d dout·out: the softmax backward's row term Σ_s P·dP, without P.
  for (int64_t r = 0; r < rows; ++r) {
    const float* o = out_block + r * out_ld;
    const float* dO = dout_block + r * out_ld;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t d = 0; d < D; ++d) dot += o[d] * dO[d];
    out_dot_dout[r] = dot;
  }
  // P = exp(scale · q kᵀ - lse), recomputed; masked keys 0 as in the forward
  gemm(false, true, rows, keys, D, scale, q_block, q_ld, k_head, k_ld, 0.0f, probs, ld);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = probs + r * ld;
    const int64_t visible = causal ? t0 + r + 1 : keys;
    const int64_t span = padded(visible);
    std::fill(row + visible, row + span, -INFINITY);
    const float row_lse = lse_block[r];
#pragma omp simd
    for (int64_t s = 0; s < span; ++s) row[s] = exp_approx(row[s] - row_lse);
    std::fill(row + span, row + ld, 0.0f);
  }
  // dv += Pᵀ · dout
  if (kv.dv != nullptr) {
    gemm(true, false, keys, D, rows, 1.0f, probs, ld, dout_block, out_ld, 1.0f, kv.dv, kv.dv_ld);
  }
  if (dq == nullptr && kv.dk == nullptr) return;
  // dP = dout · vᵀ; dS = P ∘ (dP - D_t) in place, 0 where P is (the masked keys)
  gemm(false, true, rows, keys, D, 1.0f, dout_block, out_ld, v_head, v_ld, 0.0f, dprobs, ld);
  for (int64_t r = 0; r < rows; ++r) {
    const float* p = probs + r * ld;
    float* ds = dprobs + r * ld;
    const int64_t span = padded(causal ? t0 + r + 1 : keys);
    const float row_d = out_dot_dout[r];
#pragma omp simd
    for (int64_t s = 0; s < span; ++s) ds[s] = p[s] * (ds[s] - row_d);
    std::fill(ds + span, ds + ld, 0.0f);
  }
  // dq += scale · dS · k; dk += scale · dSᵀ · q
  if (dq != nullptr) {
    gemm(false, false, rows, D, keys, scale, dprobs, ld, k_head, k_ld, 1.0f,
         dq + (b * T + t0) * q_ld + h * D, q_ld);
  }
  if (kv.dk != nullptr) {
    gemm(true, false, keys, D, rows, scale, dprobs, ld, q_block, q_ld, 1.0f, kv.dk, kv.dk_ld);
  }
}

}  // namespace

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                        const float* k, const float* v, const float* out, const float* lse,
                        int64_t B, int64_t T, int64_t H, int64_t G, int64_t D, int64_t q_ld,
                        int64_t k_ld, int64_t v_ld, bool causal) {
  check_attention_args("attention_backward", B, T, H, G, D, q_ld, k_ld, v_ld);
  if (B == 0 || T == 0) return;
  const int64_t heads_per_group = H / G;
  const int64_t blocks = (T + kQueryRows - 1) / kQueryRows;
  // The work of one (batch, kv head) pair: its query heads × query blocks, heaviest blocks first.
  const int64_t items = heads_per_group * blocks;
  const int64_t pairs = B * G;

  // All query heads of a group add into the same dk and dv rows, so each (batch, kv head) pair
  // is one task and the order of those additions is fixed. With fewer pairs than threads, a
  // pair's items are dealt to `splits` tasks (back and forth, so that causal costs even out)
  // that add into private partial sums, reduced afterwards in a fixed order: results depend on
  // the thread count but never on the schedule.
  const int64_t splits = std::min<int64_t>(items, (omp_get_max_threads() + pairs - 1) / pairs);
  const bool use_partials = splits > 1 && (dk != nullptr || dv != nullptr);
  float* partials = nullptr;  // (pairs, splits, 2, T, D): dk then dv partial sums
  if (use_partials) {
    thread_local std::vector<float> partial_storage;  // the calling thread's, grown once
    const size_t n = static_cast<size_t>(pairs * splits * 2 * T * D);
    if (partial_storage.size() < n) partial_storage.resize(n);
    partials = partial_storage.data();
  }

#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t task = 0; task < pairs * splits; ++task) {
    const int64_t b = task / splits / G;
    const int64_t g = task / splits % G;
    const int64_t split = task % splits;
    KvGrads kv{dk != nullptr ? dk + b * T * k_ld + g * D : nullptr,
               dv != nullptr ? dv + b * T * v_ld + g * D : nullptr, k_ld, v_ld};
    if (use_partials) {
      float* own = partials + task * 2 * T * D;
      std::fill(own, own + 2 * T * D, 0.0f);
      kv = {dk != nullptr ? own : nullptr, dv != nullptr ? own + T * D : nullptr, D, D};
    }
    for (int64_t item = 0; item < items; ++item) {
      const int64_t round = item / splits;
      const int64_t dealt_to = round % 2 == 0 ? item % splits : splits - 1 - item % splits;
      if (dealt_to != split) continue;
      const int64_t h = g * heads_per_group + item % heads_per_group;
      const int64_t block = blocks - 1 - item / heads_per_group;
      backward_query_block(dq, kv, dout, q, k, v, out, lse, b, h, block, T, H, G, D, q_ld, k_ld,
                           v_ld, causal);
    }
  }
  if (!use_partials) return;

    // dk, dv += the partial sums, split by split in order
#pragma omp parallel for
  for (int64_t row = 0; row < pairs * T; ++row) {  // (b, g, t)
    const int64_t b = row / (G * T);
    const int64_t g = row / T % G;
    const int64_t t = row % T;
    for (int64_t split = 0; split < splits; ++split) {
      const float* own = partials + ((b * G + g) * splits + split) * 2 * T * D;
      if (dk != nullptr) {
        float* dk_row = dk + (b * T + t) * k_ld + g * D;
        const float* part = own + t * D;
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) dk_row[d] += part[d];
      }
      if (dv != nullptr) {
        float* dv_row = dv + (b * T + t) * v_ld + g * D;
        const float* part = own + (T + t) * D;
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) dv_row[d] += part[d];
      }
    }
  }
}

}  // namespace tessel::cpu
