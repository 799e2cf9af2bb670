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
#include <numeric>
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
  std::vector<int64_t> spans;     // (kQueryRows): columns of each row that may be non-zero
};

AttentionScratch& attention_scratch(int64_t ld) {
  thread_local AttentionScratch scratch;
  const size_t n = static_cast<size_t>(kQueryRows * ld);
  if (scratch.probs.size() < n) {
    scratch.probs.resize(n);
    scratch.dprobs.resize(n);
    scratch.row_values.resize(kQueryRows);
    scratch.spans.resize(kQueryRows);
  }
  return scratch;
}

// n rounded up to whole vectors; also the row stride of a score block.
int64_t padded(int64_t n) { return (n + kLanes - 1) / kLanes * kLanes; }

void check_attention_args(const char* which, int64_t B, int64_t Tq, int64_t Tk, int64_t H,
                          int64_t G, int64_t D, int64_t q_ld, int64_t k_ld, int64_t v_ld) {
  TESSEL_CHECK(B >= 0 && Tq >= 0 && Tk >= 0 && D > 0,
               "attention.cpp: {}: bad sizes B={} Tq={} Tk={} D={}", which, B, Tq, Tk, D);
  TESSEL_CHECK(H > 0 && G > 0 && H % G == 0,
               "attention.cpp: {}: {} query heads cannot share {} kv heads evenly", which, H, G);
  TESSEL_CHECK(q_ld >= H * D && k_ld >= G * D && v_ld >= G * D,
               "attention.cpp: {}: row strides q_ld={} k_ld={} v_ld={} are shorter than the heads "
               "they hold (H·D={}, G·D={})",
               which, q_ld, k_ld, v_ld, H * D, G * D);
}

// Query rows [t0, t0 + rows) and the keys [key_begin, key_end) that at least one of them sees.
// unmasked: every row sees every key of the range (no masking work).
struct QueryBlock {
  int64_t t0, rows;
  int64_t key_begin, key_end;
  bool unmasked;

  int64_t keys() const { return key_end - key_begin; }
};

// Which keys each query row sees, and the query blocks the work is cut into. Without positions
// every query sees every key.
struct AttentionPlan {
  const int32_t* q_pos = nullptr;  // (Tq) or nullptr
  const int32_t* k_pos = nullptr;  // (Tk) or nullptr
  bool keys_sorted = true;         // k_pos non-decreasing: each row sees a prefix of the keys
  std::vector<QueryBlock> blocks;
  int64_t max_keys = 0;  // the widest block's key range
};

// The plan of one call, reused by the calling thread's later calls (no allocation once grown).
// A block ends after kQueryRows rows or where query positions stop being consecutive, so that
// the parts of a context-parallel rank's rows (chunks i and 2·CP−1−i) never share a block.
const AttentionPlan& plan_attention(int64_t Tq, int64_t Tk, const int32_t* q_pos,
                                    const int32_t* k_pos) {
  thread_local AttentionPlan plan;
  plan.q_pos = q_pos;
  plan.k_pos = k_pos;
  plan.keys_sorted = k_pos == nullptr || std::is_sorted(k_pos, k_pos + Tk);
  plan.blocks.clear();
  plan.max_keys = 0;
  int64_t t0 = 0;
  while (t0 < Tq) {
    int64_t rows = 1;
    while (t0 + rows < Tq && rows < kQueryRows &&
           (q_pos == nullptr || q_pos[t0 + rows] == q_pos[t0 + rows - 1] + 1)) {
      ++rows;
    }
    QueryBlock block{t0, rows, 0, Tk, true};
    if (q_pos != nullptr) {
      const int32_t first = q_pos[t0], last = q_pos[t0 + rows - 1];  // min and max
      if (plan.keys_sorted) {
        block.key_end = std::upper_bound(k_pos, k_pos + Tk, last) - k_pos;
        block.unmasked = block.key_end == 0 || k_pos[block.key_end - 1] <= first;
      } else {
        block.key_begin = Tk;
        block.key_end = 0;
        int32_t key_max = INT32_MIN;
        for (int64_t s = 0; s < Tk; ++s) {
          if (k_pos[s] > last) continue;
          block.key_begin = std::min(block.key_begin, s);
          block.key_end = s + 1;
        }
        for (int64_t s = block.key_begin; s < block.key_end; ++s) {
          key_max = std::max(key_max, k_pos[s]);
        }
        block.key_end = std::max(block.key_end, block.key_begin);
        block.unmasked = key_max <= first;
      }
    }
    plan.max_keys = std::max(plan.max_keys, block.keys());
    plan.blocks.push_back(block);
    t0 += rows;
  }
  return plan;
}

// Masks the scores row of query row t (block-local columns [0, block.keys())): masked keys become
// -inf, and so do the columns up to the returned span, a whole number of vectors. Columns from
// the span on are never visible; the caller zeroes them after the exponential. Span 0: the row
// sees no key of the block.
int64_t mask_row(float* row, const AttentionPlan& plan, const QueryBlock& block, int64_t t) {
  const int64_t keys = block.keys();
  int64_t visible = keys;
  if (!block.unmasked) {
    const int32_t* key_pos = plan.k_pos + block.key_begin;  // (keys)
    const int32_t position = plan.q_pos[t];
    if (plan.keys_sorted) {
      visible = std::upper_bound(key_pos, key_pos + keys, position) - key_pos;
    } else {
      int64_t seen = 0;
      for (int64_t s = 0; s < keys; ++s) {
        seen += key_pos[s] <= position;
        row[s] = key_pos[s] <= position ? row[s] : -INFINITY;
      }
      if (seen == 0) return 0;
    }
  }
  const int64_t span = padded(visible);
  std::fill(row + visible, row + span, -INFINITY);
  return span;
}

// The forward of one query block of query head h in batch b: its out rows and lse entries.
void forward_query_block(float* out, float* lse, const float* q, const float* k, const float* v,
                         const AttentionPlan& plan, const QueryBlock& block, int64_t b, int64_t h,
                         int64_t Tq, int64_t Tk, int64_t H, int64_t G, int64_t D, int64_t q_ld,
                         int64_t k_ld, int64_t v_ld) {
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
    const int64_t span = mask_row(row, plan, block, t0 + r);
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
             int64_t v_ld, const int32_t* q_pos, const int32_t* k_pos) {
  const AttentionPlan& plan = plan_attention(Tq, Tk, q_pos, k_pos);
  const int64_t blocks = static_cast<int64_t>(plan.blocks.size());
  const int64_t tasks = B * H * blocks;
  // Tasks are independent (each writes its own rows of out and lse), so dynamic scheduling keeps
  // results deterministic. The last query blocks, the heaviest when causal, go first.
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t task = 0; task < tasks; ++task) {
    const QueryBlock& block = plan.blocks[blocks - 1 - task / (B * H)];
    const int64_t b = task % (B * H) / H;
    const int64_t h = task % H;
    forward_query_block(out, lse, q, k, v, plan, block, b, h, Tq, Tk, H, G, D, q_ld, k_ld, v_ld);
  }
}

// Positions 0..T-1, the causal special case of the block kernels; the calling thread's, grown once.
const int32_t* causal_positions(int64_t T) {
  thread_local std::vector<int32_t> positions;
  TESSEL_CHECK(T <= INT32_MAX, "attention.cpp: sequence length {} exceeds int32 positions", T);
  if (static_cast<int64_t>(positions.size()) < T) {
    positions.resize(T);
    std::iota(positions.begin(), positions.end(), 0);
  }
  return positions.data();
}

}  // namespace

void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       int64_t B, int64_t T, int64_t H, int64_t G, int64_t D, int64_t q_ld,
                       int64_t k_ld, int64_t v_ld, bool causal) {
  check_attention_args("attention_forward", B, T, T, H, G, D, q_ld, k_ld, v_ld);
  const int32_t* positions = causal ? causal_positions(T) : nullptr;
  forward(out, lse, q, k, v, B, T, T, H, G, D, q_ld, k_ld, v_ld, positions, positions);
}

void attention_block_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                             int64_t B, int64_t Tq, int64_t Tk, int64_t H, int64_t G, int64_t D,
                             int64_t q_ld, int64_t k_ld, int64_t v_ld, const int32_t* q_pos,
                             const int32_t* k_pos) {
  check_attention_args("attention_block_forward", B, Tq, Tk, H, G, D, q_ld, k_ld, v_ld);
  TESSEL_CHECK(q_pos != nullptr && k_pos != nullptr,
               "attention.cpp: attention_block_forward: query and key positions are required");
  forward(out, lse, q, k, v, B, Tq, Tk, H, G, D, q_ld, k_ld, v_ld, q_pos, k_pos);
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
                          int64_t k_ld, int64_t v_ld) {
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
    const int64_t span = mask_row(row, plan, block, t0 + r);
#pragma omp simd
    for (int64_t s = 0; s < span; ++s) row[s] = exp_approx(row[s] - row_lse);
    std::fill(row + span, row + ld, 0.0f);
    spans[r] = span;
  }
  // dv += Pᵀ · dout
  float* dk_rows = kv.dk != nullptr ? kv.dk + block.key_begin * kv.dk_ld : nullptr;  // (keys, D)
  float* dv_rows = kv.dv != nullptr ? kv.dv + block.key_begin * kv.dv_ld : nullptr;  // (keys, D)
  if (dv_rows != nullptr) {
    gemm(true, false, keys, D, rows, 1.0f, probs, ld, dout_block, out_ld, 1.0f, dv_rows, kv.dv_ld);
  }
  if (dq == nullptr && dk_rows == nullptr) return;
  // dP = dout · vᵀ; dS = P ∘ (dP - D_t) in place, 0 where P is (the masked keys)
  gemm(false, true, rows, keys, D, 1.0f, dout_block, out_ld, v_head, v_ld, 0.0f, dprobs, ld);
  for (int64_t r = 0; r < rows; ++r) {
    const float* p = probs + r * ld;
    float* ds = dprobs + r * ld;
    const int64_t span = spans[r];
    const float row_d = out_dot_dout[r];
#pragma omp simd
    for (int64_t s = 0; s < span; ++s) ds[s] = p[s] * (ds[s] - row_d);
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
              const int32_t* q_pos, const int32_t* k_pos) {
  if (B == 0 || Tq == 0 || Tk == 0) return;
  const AttentionPlan& plan = plan_attention(Tq, Tk, q_pos, k_pos);
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
      const QueryBlock& block = plan.blocks[blocks - 1 - item / heads_per_group];
      backward_query_block(dq, kv, dout, q, k, v, out, lse, plan, block, b, h, Tq, Tk, H, G, D,
                           q_ld, k_ld, v_ld);
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
                        int64_t k_ld, int64_t v_ld, bool causal) {
  check_attention_args("attention_backward", B, T, T, H, G, D, q_ld, k_ld, v_ld);
  const int32_t* positions = causal ? causal_positions(T) : nullptr;
  backward(dq, dk, dv, dout, q, k, v, out, lse, B, T, T, H, G, D, q_ld, k_ld, v_ld, positions,
           positions);
}

void attention_block_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                              const float* k, const float* v, const float* out, const float* lse,
                              int64_t B, int64_t Tq, int64_t Tk, int64_t H, int64_t G, int64_t D,
                              int64_t q_ld, int64_t k_ld, int64_t v_ld, const int32_t* q_pos,
                              const int32_t* k_pos) {
  check_attention_args("attention_block_backward", B, Tq, Tk, H, G, D, q_ld, k_ld, v_ld);
  TESSEL_CHECK(q_pos != nullptr && k_pos != nullptr,
               "attention.cpp: attention_block_backward: query and key positions are required");
  backward(dq, dk, dv, dout, q, k, v, out, lse, B, Tq, Tk, H, G, D, q_ld, k_ld, v_ld, q_pos, k_pos);
}

}  // namespace tessel::cpu
