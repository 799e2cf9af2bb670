// The backward of attention (attention.cpp): the probabilities recomputed from (q, k, out, lse)
// block by block, five gemms each.
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

// Where backward work adds its dk and dv: rows (Tk, D) of one kv head, with their strides. Either
// the gradients themselves or a partial sum private to one task.
struct KvGrads {
  float* dk;
  float* dv;
  int64_t dk_ld;
  int64_t dv_ld;
};

// The backward of one query block of query head h in batch b: its dq rows += ..., and kv.dk,
// kv.dv (query head h's kv head) += ... . out and lse are the attention's final ones, so that with
// a block of keys only this block's share of the gradients comes out.
void backward_query_block(float* dq, KvGrads kv, const float* dout, const float* q, const float* k,
                          const float* v, const float* out, const float* lse,
                          const AttentionPlan& plan, const QueryBlock& block, int64_t b, int64_t h,
                          int64_t Tq, int64_t Tk, int64_t H, int64_t G, int64_t D, int64_t q_ld,
                          int64_t k_ld, int64_t v_ld, const DropoutSite& dropout) {
  const int64_t keys = block.keys();
  if (keys == 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int64_t g = h / (H / G);
  const int64_t out_ld = H * D;
  const int64_t t0 = block.t0;
  const int64_t rows = block.rows;
  const int64_t ld = padded(keys);
  AttentionScratch& scratch = attention_scratch(padded(plan.max_keys));
  float* probs = scratch.probs.data();              // (rows, ld)
  float* dprobs = scratch.dprobs.data();            // (rows, ld)
  float* out_dot_dout = scratch.row_values.data();  // (rows)
  int64_t* spans = scratch.spans.data();            // (rows)

  const float* q_block = q + (b * Tq + t0) * q_ld + h * D;              // (rows, D), stride q_ld
  const float* k_head = k + (b * Tk + block.key_begin) * k_ld + g * D;  // (keys, D), stride k_ld
  const float* v_head = v + (b * Tk + block.key_begin) * v_ld + g * D;  // (keys, D), stride v_ld
  const float* out_block = out + (b * Tq + t0) * out_ld + h * D;        // (rows, D), stride H·D
  const float* dout_block = dout + (b * Tq + t0) * out_ld + h * D;      // (rows, D), stride H·D
  const float* lse_block = lse + (b * H + h) * Tq + t0;                 // (rows)

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
    const float row_lse = lse_block[r];
    if (row_lse == -INFINITY) {  // the row sees no key at all
      std::fill(row, row + ld, 0.0f);
      spans[r] = 0;
      continue;
    }
    const int64_t span = mask_row(row, plan, block, b, t0 + r);
#pragma omp simd
    for (int64_t s = 0; s < span; ++s) row[s] = exp_approx(row[s] - row_lse);
    std::fill(row + span, row + ld, 0.0f);
    spans[r] = span;
  }
  // Attention dropout: the forward's factors F redrawn; dv takes the dropped P ∘ F, and dS below
  // P ∘ (F ∘ dP − D_t) (D_t = Σ dout·out is Σ_s (P ∘ F) ∘ dP, the dropped output's).
  const bool drops = dropout.active();
  float* factors = scratch.factors.data();  // (rows, ld)
  if (drops) {
    for (int64_t r = 0; r < rows; ++r) {
      float* f = factors + r * ld;
      attention_dropout_row(f, dropout, plan, block, b * Tq + t0 + r, query_position(plan, t0 + r), h, spans[r]);
      for (int64_t s = 0; s < spans[r]; ++s) dprobs[r * ld + s] = probs[r * ld + s] * f[s];
      std::fill(dprobs + r * ld + spans[r], dprobs + (r + 1) * ld, 0.0f);
    }
  }
  const float* dropped = drops ? dprobs : probs;  // (rows, ld) P ∘ F, or P
  // dv += (P ∘ F)ᵀ · dout
  float* dk_rows = kv.dk != nullptr ? kv.dk + block.key_begin * kv.dk_ld : nullptr;  // (keys, D)
  float* dv_rows = kv.dv != nullptr ? kv.dv + block.key_begin * kv.dv_ld : nullptr;  // (keys, D)
  if (dv_rows != nullptr) {
    gemm(true, false, keys, D, rows, 1.0f, dropped, ld, dout_block, out_ld, 1.0f, dv_rows, kv.dv_ld);
  }
  if (dq == nullptr && dk_rows == nullptr) return;
  // dP = dout · vᵀ; dS = P ∘ (dP - D_t) in place, 0 where P is (the masked keys)
  gemm(false, true, rows, keys, D, 1.0f, dout_block, out_ld, v_head, v_ld, 0.0f, dprobs, ld);
  for (int64_t r = 0; r < rows; ++r) {
    const float* p = probs + r * ld;
    float* ds = dprobs + r * ld;
    const int64_t span = spans[r];
    const float row_d = out_dot_dout[r];
    if (drops) {
      const float* f = factors + r * ld;
#pragma omp simd
      for (int64_t s = 0; s < span; ++s) ds[s] = p[s] * (f[s] * ds[s] - row_d);
    } else {
#pragma omp simd
      for (int64_t s = 0; s < span; ++s) ds[s] = p[s] * (ds[s] - row_d);
    }
    std::fill(ds + span, ds + ld, 0.0f);
  }
  // dq += scale · dS · k; dk += scale · dSᵀ · q
  if (dq != nullptr) {
    gemm(false, false, rows, D, keys, scale, dprobs, ld, k_head, k_ld, 1.0f,
         dq + (b * Tq + t0) * q_ld + h * D, q_ld);
  }
  if (dk_rows != nullptr) {
    gemm(true, false, keys, D, rows, scale, dprobs, ld, q_block, q_ld, 1.0f, dk_rows, kv.dk_ld);
  }
}

void backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
              const float* v, const float* out, const float* lse, int64_t B, int64_t Tq, int64_t Tk,
              int64_t H, int64_t G, int64_t D, int64_t q_ld, int64_t k_ld, int64_t v_ld,
              const int32_t* q_pos, const int32_t* k_pos, const int32_t* key_start,
              const DropoutSite& dropout) {
  if (B == 0 || Tq == 0 || Tk == 0) return;
  const AttentionPlan& plan = plan_attention(Tq, Tk, q_pos, k_pos, key_start);
  const int64_t heads_per_group = H / G;
  const int64_t blocks = static_cast<int64_t>(plan.blocks.size());
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
  float* partials = nullptr;  // (pairs, splits, 2, Tk, D): dk then dv partial sums
  if (use_partials) {
    thread_local std::vector<float> partial_storage;  // the calling thread's, grown once
    const size_t n = static_cast<size_t>(pairs * splits * 2 * Tk * D);
    if (partial_storage.size() < n) partial_storage.resize(n);
    partials = partial_storage.data();
  }

#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t task = 0; task < pairs * splits; ++task) {
    const int64_t b = task / splits / G;
    const int64_t g = task / splits % G;
    const int64_t split = task % splits;
    KvGrads kv{dk != nullptr ? dk + b * Tk * k_ld + g * D : nullptr,
               dv != nullptr ? dv + b * Tk * v_ld + g * D : nullptr, k_ld, v_ld};
    if (use_partials) {
      float* own = partials + task * 2 * Tk * D;
      std::fill(own, own + 2 * Tk * D, 0.0f);
      kv = {dk != nullptr ? own : nullptr, dv != nullptr ? own + Tk * D : nullptr, D, D};
    }
    for (int64_t item = 0; item < items; ++item) {
      const int64_t round = item / splits;
      const int64_t dealt_to = round % 2 == 0 ? item % splits : splits - 1 - item % splits;
      if (dealt_to != split) continue;
      const int64_t h = g * heads_per_group + item % heads_per_group;
      const QueryBlock block =
          narrow_to_documents(plan, plan.blocks[blocks - 1 - item / heads_per_group], b);
      backward_query_block(dq, kv, dout, q, k, v, out, lse, plan, block, b, h, Tq, Tk, H, G, D,
                           q_ld, k_ld, v_ld, dropout);
    }
  }
  if (!use_partials) return;

    // dk, dv += the partial sums, split by split in order
#pragma omp parallel for
  for (int64_t row = 0; row < pairs * Tk; ++row) {  // (b, g, s)
    const int64_t b = row / (G * Tk);
    const int64_t g = row / Tk % G;
    const int64_t s = row % Tk;
    for (int64_t split = 0; split < splits; ++split) {
      const float* own = partials + ((b * G + g) * splits + split) * 2 * Tk * D;
      if (dk != nullptr) {
        float* dk_row = dk + (b * Tk + s) * k_ld + g * D;
        const float* part = own + s * D;
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) dk_row[d] += part[d];
      }
      if (dv != nullptr) {
        float* dv_row = dv + (b * Tk + s) * v_ld + g * D;
        const float* part = own + (Tk + s) * D;
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) dv_row[d] += part[d];
      }
    }
  }
}

}  // namespace

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                        const float* k, const float* v, const float* out, const float* lse,
                        int64_t B, int64_t T, int64_t H, int64_t G, int64_t D, int64_t q_ld,
                        int64_t k_ld, int64_t v_ld, bool causal, const DropoutSite& dropout) {
  check_attention_args("attention_backward", B, T, T, H, G, D, q_ld, k_ld, v_ld, nullptr, nullptr,
                       false);
  const int32_t* positions = causal ? causal_positions(T) : nullptr;
  backward(dq, dk, dv, dout, q, k, v, out, lse, B, T, T, H, G, D, q_ld, k_ld, v_ld, positions,
           positions, nullptr, dropout);
}

void attention_block_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                              const float* k, const float* v, const float* out, const float* lse,
                              int64_t B, int64_t Tq, int64_t Tk, int64_t H, int64_t G, int64_t D,
                              int64_t q_ld, int64_t k_ld, int64_t v_ld, const int32_t* q_pos,
                              const int32_t* k_pos, const int32_t* key_start, const DropoutSite& dropout) {
  check_attention_args("attention_block_backward", B, Tq, Tk, H, G, D, q_ld, k_ld, v_ld, q_pos, k_pos,
                       true);
  backward(dq, dk, dv, dout, q, k, v, out, lse, B, Tq, Tk, H, G, D, q_ld, k_ld, v_ld, q_pos, k_pos,
           key_start, dropout);
}

}  // namespace tessel::cpu
