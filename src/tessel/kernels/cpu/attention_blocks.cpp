#include "tessel/kernels/cpu/attention_blocks.h"
#include "tessel/kernels/cpu/dropout_factors.h"

#include <algorithm>
#include <climits>
#include <numeric>

#include "tessel/core/error.h"

namespace tessel::cpu::attention_detail {

AttentionScratch& attention_scratch(int64_t ld) {
  thread_local AttentionScratch scratch;
  const size_t n = static_cast<size_t>(kQueryRows * ld);
  if (scratch.probs.size() < n) {
    scratch.probs.resize(n);
    scratch.dprobs.resize(n);
    scratch.factors.resize(n);
    scratch.row_values.resize(kQueryRows);
    scratch.spans.resize(kQueryRows);
  }
  return scratch;
}

void check_attention_args(const char* which, int64_t B, int64_t Tq, int64_t Tk, int64_t H,
                          int64_t G, int64_t D, int64_t q_ld, int64_t k_ld, int64_t v_ld,
                          const int32_t* q_pos, const int32_t* k_pos, bool positions_required) {
  TESSEL_CHECK(!positions_required || (q_pos != nullptr && k_pos != nullptr),
               "attention.cpp: {}: query and key positions are required", which);
  TESSEL_CHECK(B >= 0 && Tq >= 0 && Tk >= 0 && D > 0,
               "attention.cpp: {}: bad sizes B={} Tq={} Tk={} D={}", which, B, Tq, Tk, D);
  TESSEL_CHECK(H > 0 && G > 0 && H % G == 0,
               "attention.cpp: {}: {} query heads cannot share {} kv heads evenly", which, H, G);
  TESSEL_CHECK(q_ld >= H * D && k_ld >= G * D && v_ld >= G * D,
               "attention.cpp: {}: row strides q_ld={} k_ld={} v_ld={} are shorter than the heads "
               "they hold (H·D={}, G·D={})",
               which, q_ld, k_ld, v_ld, H * D, G * D);
}

const AttentionPlan& plan_attention(int64_t Tq, int64_t Tk, const int32_t* q_pos,
                                    const int32_t* k_pos, const int32_t* key_start) {
  thread_local AttentionPlan plan;
  plan.q_pos = q_pos;
  plan.k_pos = k_pos;
  plan.key_start = key_start;
  plan.Tq = Tq;
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

QueryBlock narrow_to_documents(const AttentionPlan& plan, QueryBlock block, int64_t b) {
  if (plan.key_start == nullptr || block.keys() == 0) return block;
  const int32_t* starts = plan.key_start + b * plan.Tq + block.t0;  // (rows)
  const auto [earliest, latest] = std::minmax_element(starts, starts + block.rows);
  if (!plan.keys_sorted) {
    block.unmasked = false;
    return block;
  }
  const int32_t* k_pos = plan.k_pos;
  block.key_begin = std::lower_bound(k_pos + block.key_begin, k_pos + block.key_end, *earliest) - k_pos;
  block.unmasked = block.unmasked && (block.keys() == 0 || k_pos[block.key_begin] >= *latest);
  return block;
}

int64_t mask_row(float* row, const AttentionPlan& plan, const QueryBlock& block, int64_t b,
                 int64_t t) {
  const int64_t keys = block.keys();
  int64_t visible = keys;
  if (!block.unmasked) {
    const int32_t* key_pos = plan.k_pos + block.key_begin;  // (keys)
    const int32_t position = plan.q_pos[t];
    const int32_t first = plan.key_start != nullptr ? plan.key_start[b * plan.Tq + t] : INT32_MIN;
    if (plan.keys_sorted) {
      visible = std::upper_bound(key_pos, key_pos + keys, position) - key_pos;
      const int64_t hidden = std::lower_bound(key_pos, key_pos + keys, first) - key_pos;
      if (hidden >= visible) return 0;
      std::fill(row, row + hidden, -INFINITY);
    } else {
      int64_t seen = 0;
      for (int64_t s = 0; s < keys; ++s) {
        const bool sees = key_pos[s] <= position && key_pos[s] >= first;
        seen += sees;
        row[s] = sees ? row[s] : -INFINITY;
      }
      if (seen == 0) return 0;
    }
  }
  const int64_t span = padded(visible);
  std::fill(row + visible, row + span, -INFINITY);
  return span;
}

void attention_dropout_row(float* factors, const DropoutSite& site, const AttentionPlan& plan,
                           const QueryBlock& block, int64_t row, int32_t q_position, int64_t h, int64_t span) {
  const int64_t keys = std::min(span, block.keys());
  const int32_t first = key_position(plan, block, 0);
  bool consecutive = true;
  for (int64_t s = 1; s < keys && consecutive && plan.k_pos != nullptr; ++s)
    consecutive = plan.k_pos[block.key_begin + s] == first + s;
  if (consecutive) {
    const uint32_t head_site = site.site + static_cast<uint32_t>(site.feature_offset + h);
    dropout_factors(factors, site.seed, head_site, site.samples[row], q_position, first, keys, site.threshold(),
                    site.keep_scale());
  } else {
    for (int64_t s = 0; s < keys; ++s)
      factors[s] = attention_dropout_factor(site, row, q_position, h, key_position(plan, block, s));
  }
  std::fill(factors + keys, factors + span, 0.0f);
}

const int32_t* causal_positions(int64_t T) {
  thread_local std::vector<int32_t> positions;
  TESSEL_CHECK(T <= INT32_MAX, "attention.cpp: sequence length {} exceeds int32 positions", T);
  if (static_cast<int64_t>(positions.size()) < T) {
    positions.resize(T);
    std::iota(positions.begin(), positions.end(), 0);
  }
  return positions.data();
}

}  // namespace tessel::cpu::attention_detail
