// The work plan shared by the attention kernels (attention.cpp, attention_backward.cpp): query
// blocks, the keys each block sees, masking, and the per-thread scratch. Internal to the CPU
// backend.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "tessel/kernels/dropout.h"

namespace tessel::cpu::attention_detail {

// Query rows per block: large enough for the gemms to run near peak, small enough that the
// causal diagonal block (half of it masked) wastes little and the scores stay in L2. 64 measured
// faster than 32 and 128 for T = 128…1024, D = 32…128.
inline constexpr int64_t kQueryRows = 64;

// Vector width in floats (AVX-512); score rows are padded to a multiple of it.
inline constexpr int64_t kLanes = 16;

// Written as this exact select, the max reduction compiles to vmaxps (std::max does not).
inline float row_max(const float* row, int64_t n) {
  float max = -INFINITY;
#pragma omp simd reduction(max : max)
  for (int64_t s = 0; s < n; ++s) max = max > row[s] ? max : row[s];
  return max;
}

// The per-thread work space, grown on first use and kept: no allocation in later calls.
struct AttentionScratch {
  std::vector<float> probs;       // (kQueryRows, ld): scores, then probabilities
  std::vector<float> dprobs;      // (kQueryRows, ld): dP, then dS (backward)
  std::vector<float> factors;     // (kQueryRows, ld): attention dropout's factors (backward)
  std::vector<float> row_values;  // (kQueryRows): 1/Σ (forward) or Σ_d dout·out (backward)
  std::vector<int64_t> spans;     // (kQueryRows): columns of each row that may be non-zero
};

AttentionScratch& attention_scratch(int64_t ld);

// n rounded up to whole vectors; also the row stride of a score block.
inline int64_t padded(int64_t n) { return (n + kLanes - 1) / kLanes * kLanes; }

// The arguments' sizes and strides; the block kernels (positions_required) need both positions.
void check_attention_args(const char* which, int64_t B, int64_t Tq, int64_t Tk, int64_t H,
                          int64_t G, int64_t D, int64_t q_ld, int64_t k_ld, int64_t v_ld,
                          const int32_t* q_pos, const int32_t* k_pos, bool positions_required);

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
  const int32_t* q_pos = nullptr;      // (Tq) or nullptr
  const int32_t* k_pos = nullptr;      // (Tk) or nullptr
  const int32_t* key_start = nullptr;  // (B, Tq) or nullptr: each row's first visible key position
  int64_t Tq = 0;
  bool keys_sorted = true;         // k_pos non-decreasing: each row sees a prefix of the keys
  std::vector<QueryBlock> blocks;
  int64_t max_keys = 0;  // the widest block's key range
};

// The plan of one call, reused by the calling thread's later calls (no allocation once grown).
// A block ends after kQueryRows rows or where query positions stop being consecutive, so that
// the parts of a context-parallel rank's rows (chunks i and 2·CP−1−i) never share a block.
const AttentionPlan& plan_attention(int64_t Tq, int64_t Tk, const int32_t* q_pos,
                                    const int32_t* k_pos, const int32_t* key_start);

// `block` for batch item b under packed documents (plan.key_start): row t sees only keys at
// positions ≥ key_start[b·Tq + t], its document's first. Keys before the block's earliest start
// leave the range; the block is masked when some row starts after the range's first key.
// The global positions of query row t and of key column s of a block (the plan's, or the index).
inline int32_t query_position(const AttentionPlan& plan, int64_t t) {
  return plan.q_pos != nullptr ? plan.q_pos[t] : static_cast<int32_t>(t);
}
inline int32_t key_position(const AttentionPlan& plan, const QueryBlock& block, int64_t s) {
  return plan.k_pos != nullptr ? plan.k_pos[block.key_begin + s] : static_cast<int32_t>(block.key_begin + s);
}

QueryBlock narrow_to_documents(const AttentionPlan& plan, QueryBlock block, int64_t b);

// Masks the scores row of query row t of batch item b (block-local columns [0, block.keys())):
// masked keys become -inf, and so do the columns up to the returned span, a whole number of
// vectors. Columns from the span on are never visible; the caller zeroes them after the
// exponential. Span 0: the row sees no key of the block.
int64_t mask_row(float* row, const AttentionPlan& plan, const QueryBlock& block, int64_t b,
                 int64_t t);

// Attention dropout's factors (kernels/dropout.h) of query row `row` (its index b·Tq + t in the
// site's rows, at global position q_position) of head h for the block's key columns [0, span);
// columns past the block's keys (a row's padding, probability 0) get 0. Keys at consecutive
// positions, as in every causal or context-parallel block, are drawn as one run of features
// (dropout_factors.h), others one by one.
void attention_dropout_row(float* factors, const DropoutSite& site, const AttentionPlan& plan,
                           const QueryBlock& block, int64_t row, int32_t q_position, int64_t h, int64_t span);

// Positions 0..T-1, the causal special case of the block kernels; the calling thread's, grown once.
const int32_t* causal_positions(int64_t T);

}  // namespace tessel::cpu::attention_detail
