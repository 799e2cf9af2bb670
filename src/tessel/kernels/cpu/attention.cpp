// Scaled dot-product attention (grouped-query heads), flash-attention style: the forward saves
// only lse = log Σ exp(scores) per query row, and the backward recomputes the probabilities from
// (q, k, v, out, lse, dout). Context parallelism relies on that: ring attention runs the same
// math on blocks of keys (attention_block_forward/backward, keys visible by global position) and
// merges partial results by their lse.
//
// Work is cut into blocks of up to kQueryRows query rows of one head, at consecutive positions.
// For each block a plan fixes the range of keys any of its rows sees (causal: keys up to the
// block's last row, so blocks above the diagonal are never computed; a block that sees no key is
// skipped) and whether some of them are masked. The scores against that range come from one gemm,
// the masked keys are set to -inf, the softmax runs per row in a thread-local scratch, and P·V is
// a second gemm. The backward follows the same blocks with five gemms each. Results are
// deterministic for a given thread count: no task's result depends on which thread runs it or
// when.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "tessel/core/error.h"
#include "tessel/kernels/cpu/attention_blocks.h"
#include "tessel/kernels/cpu/gemm.h"
#include "tessel/kernels/cpu/kernels.h"
#include "tessel/kernels/cpu/vec_math.h"

namespace tessel::cpu {

using namespace attention_detail;

namespace {

// The forward of one query block of query head h in batch b: its out rows and lse entries.
void forward_query_block(float* out, float* lse, const float* q, const float* k, const float* v,
                         const AttentionPlan& plan, const QueryBlock& block, int64_t b, int64_t h,
                         int64_t Tq, int64_t Tk, int64_t H, int64_t G, int64_t D, int64_t q_ld,
                         int64_t k_ld, int64_t v_ld, const DropoutSite& dropout) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int64_t g = h / (H / G);
  const int64_t out_ld = H * D;
  const int64_t t0 = block.t0;
  const int64_t rows = block.rows;
  const int64_t keys = block.keys();
  float* out_block = out + (b * Tq + t0) * out_ld + h * D;  // (rows, D), stride H·D
  float* lse_block = lse + (b * H + h) * Tq + t0;           // (rows)
  if (keys == 0) {  // no key visible: nothing attended to, marked for merging by lse = -inf
    for (int64_t r = 0; r < rows; ++r) std::fill_n(out_block + r * out_ld, D, 0.0f);
    std::fill_n(lse_block, rows, -INFINITY);
    return;
  }
  const int64_t ld = padded(keys);
  AttentionScratch& scratch = attention_scratch(padded(plan.max_keys));
  float* probs = scratch.probs.data();         // (rows, ld)
  float* inv_sum = scratch.row_values.data();  // (rows)

  const float* q_block = q + (b * Tq + t0) * q_ld + h * D;              // (rows, D), stride q_ld
  const float* k_head = k + (b * Tk + block.key_begin) * k_ld + g * D;  // (keys, D), stride k_ld
  const float* v_head = v + (b * Tk + block.key_begin) * v_ld + g * D;  // (keys, D), stride v_ld

  // scores = scale · q kᵀ
  gemm(false, true, rows, keys, D, scale, q_block, q_ld, k_head, k_ld, 0.0f, probs, ld);
  // P = exp(scores - row max), worked on in whole vectors up to the row's span; 0 beyond it.
  for (int64_t r = 0; r < rows; ++r) {
    float* row = probs + r * ld;
    const int64_t span = mask_row(row, plan, block, b, t0 + r);
    if (span == 0) {  // this row sees no key of the block
      std::fill(row, row + ld, 0.0f);
      lse_block[r] = -INFINITY;
      inv_sum[r] = 0.0f;
      continue;
    }
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
    if (dropout.active()) {  // after the sum: dropout leaves the normalisation alone
      float* factors = scratch.factors.data();  // (span)
      attention_dropout_row(factors, dropout, plan, block, b * Tq + t0 + r, query_position(plan, t0 + r), h, span);
#pragma omp simd
      for (int64_t s = 0; s < span; ++s) row[s] *= factors[s];
    }
  }
  // out = (unnormalised P) · v, then each row divided by its sum
  gemm(false, false, rows, D, keys, 1.0f, probs, ld, v_head, v_ld, 0.0f, out_block, out_ld);
  for (int64_t r = 0; r < rows; ++r) {
    float* out_row = out_block + r * out_ld;
#pragma omp simd
    for (int64_t d = 0; d < D; ++d) out_row[d] *= inv_sum[r];
  }
}

void forward(float* out, float* lse, const float* q, const float* k, const float* v, int64_t B,
             int64_t Tq, int64_t Tk, int64_t H, int64_t G, int64_t D, int64_t q_ld, int64_t k_ld,
             int64_t v_ld, const int32_t* q_pos, const int32_t* k_pos, const int32_t* key_start,
             const DropoutSite& dropout) {
  const AttentionPlan& plan = plan_attention(Tq, Tk, q_pos, k_pos, key_start);
  const int64_t blocks = static_cast<int64_t>(plan.blocks.size());
  const int64_t tasks = B * H * blocks;
  // Tasks are independent (each writes its own rows of out and lse), so dynamic scheduling keeps
  // results deterministic. The last query blocks, the heaviest when causal, go first.
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t b = task % (B * H) / H;
    const int64_t h = task % H;
    const QueryBlock block = narrow_to_documents(plan, plan.blocks[blocks - 1 - task / (B * H)], b);
    forward_query_block(out, lse, q, k, v, plan, block, b, h, Tq, Tk, H, G, D, q_ld, k_ld, v_ld, dropout);
  }
}

}  // namespace

void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       int64_t B, int64_t T, int64_t H, int64_t G, int64_t D, int64_t q_ld,
                       int64_t k_ld, int64_t v_ld, bool causal, const DropoutSite& dropout) {
  check_attention_args("attention_forward", B, T, T, H, G, D, q_ld, k_ld, v_ld, nullptr, nullptr,
                       false);
  const int32_t* positions = causal ? causal_positions(T) : nullptr;
  forward(out, lse, q, k, v, B, T, T, H, G, D, q_ld, k_ld, v_ld, positions, positions, nullptr, dropout);
}

void attention_block_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                             int64_t B, int64_t Tq, int64_t Tk, int64_t H, int64_t G, int64_t D,
                             int64_t q_ld, int64_t k_ld, int64_t v_ld, const int32_t* q_pos,
                             const int32_t* k_pos, const int32_t* key_start, const DropoutSite& dropout) {
  check_attention_args("attention_block_forward", B, Tq, Tk, H, G, D, q_ld, k_ld, v_ld, q_pos, k_pos,
                       true);
  forward(out, lse, q, k, v, B, Tq, Tk, H, G, D, q_ld, k_ld, v_ld, q_pos, k_pos, key_start, dropout);
}

void attention_merge(float* out, float* lse, const float* block_out, const float* block_lse,
                     int64_t B, int64_t T, int64_t H, int64_t D) {
  TESSEL_CHECK(B >= 0 && T >= 0 && H > 0 && D > 0,
               "attention.cpp: attention_merge: bad sizes B={} T={} H={} D={}", B, T, H, D);
  const int64_t rows = B * H * T;
  // The weights are worked out in double from the difference of the two lse, never through the
  // rounded new lse, so the merge costs one rounding per element (the partial results are exact
  // to float rounding, and so stays their merge).
#pragma omp parallel for if (worth_parallel(rows * D))
  for (int64_t i = 0; i < rows; ++i) {  // (b, h, t)
    const int64_t b = i / (H * T), h = i / T % H, t = i % T;
    const float theirs = block_lse[i];
    if (theirs == -INFINITY) continue;
    float* out_row = out + (b * T + t) * H * D + h * D;
    const float* block_row = block_out + (b * T + t) * H * D + h * D;
    const float ours = lse[i];
    if (ours == -INFINITY) {
      std::copy_n(block_row, D, out_row);
      lse[i] = theirs;
      continue;
    }
    const double diff = static_cast<double>(theirs) - ours;
    const double small = std::exp(-std::abs(diff));  // the lesser side's weight over the greater's
    const double ours_weight = diff > 0 ? small / (1 + small) : 1 / (1 + small);
    const double theirs_weight = diff > 0 ? 1 / (1 + small) : small / (1 + small);
    for (int64_t d = 0; d < D; ++d) {
      out_row[d] = static_cast<float>(ours_weight * out_row[d] + theirs_weight * block_row[d]);
    }
    lse[i] = static_cast<float>(std::max<double>(ours, theirs) + std::log1p(small));
  }
}

}  // namespace tessel::cpu
