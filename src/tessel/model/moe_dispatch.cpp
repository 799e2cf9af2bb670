// The MoE layer's token dispatch (moe.h), as Megatron's MoEAlltoAllTokenDispatcher: the plan of
// where every routed row goes, the all-to-all(v) over EP that takes the rows to the ranks holding
// their experts and back, and with expert tensor parallelism the all-gather of the received rows
// over ETP and the reduce-scatter of the experts' partial results.

#include <algorithm>

#include "tessel/core/error.h"
#include "tessel/model/moe.h"

namespace tessel {

// Where every kept assignment goes: the dispatch order groups rows by expert (so by destination
// rank, each rank's experts in turn), tokens in order within an expert; each expert's block
// padded to the capacity when asked. The row counts per (rank, expert) travel first, so each
// rank learns what will arrive from whom, then over ETP what its ETP peers received; then the
// statistics are summed over EP.
void MoeLayer::plan_dispatch(Saved& s) {
  const int64_t N = s.N;
  std::vector<float>& counts = host_counts_;   // (E) rows per expert out, then (ETP·EP·E_l) in
  std::vector<double>& kept = stats_buffer_;   // (E + 1) kept per expert, then the dropped
  float* device_counts = count_buffer_.data();
  k_.moe_count_assignments(device_counts, s.experts.ints(), keep_.ints(), N * topk_, E_);
  k_.memory.to_host(counts.data(), device_counts, E_ * 4);
  double kept_total = 0;
  for (int e = 0; e < E_; ++e) {
    kept[e] = counts[e];
    kept_total += counts[e];
  }
  kept[E_] = static_cast<double>(N * topk_) - kept_total;
  const int64_t pad = moe_.pad_to_capacity ? s.capacity : -1;
  int64_t rows = 0;
  std::fill(s.send_rows.begin(), s.send_rows.end(), 0);
  for (int e = 0; e < E_; ++e) {
    const int64_t expert_rows = pad >= 0 ? pad : static_cast<int64_t>(kept[e]);
    counts[e] = static_cast<float>(expert_rows);
    first_rows_[e] = static_cast<int32_t>(rows);
    rows += expert_rows;
    s.send_rows[e / E_l_] += expert_rows;
  }
  s.rows_out = rows;
  TESSEL_CHECK(rows < (int64_t{1} << 24), "MoE: {} rows to dispatch (counts travel as floats)",
               rows);
  k_.memory.from_host(row_cursor_.ints(), first_rows_.data(), E_ * 4);
  k_.moe_assign_slots(s.slot_row.ints(), row_cursor_.ints(), s.experts.ints(), keep_.ints(),
                      N * topk_);
  k_.memory.from_host(device_counts, counts.data(), E_ * 4);

  // Counts first: rank r receives the E_l counts of its experts from every EP rank, into its
  // ETP rank's place; the ETP group's ranks then gather each other's.
  const int64_t B = P_ * E_l_;  // blocks one rank receives
  float* own = device_counts + E_ + etp_rank_ * B;
  for (int r = 0; r < P_; ++r) {
    counts_out_[r] = counts_in_[r] = E_l_;
    offsets_out_[r] = offsets_in_[r] = r * E_l_;
  }
  ep_->all_to_all_v(device_counts, counts_out_.data(), offsets_out_.data(), own,
                    counts_in_.data(), offsets_in_.data());
  if (Q_ > 1) {
    for (int j = 0; j < Q_; ++j) {
      etp_counts_[j] = B;
      etp_offsets_[j] = j * B;
    }
    etp_->all_gather_v(own, device_counts + E_, etp_counts_.data(), etp_offsets_.data());
  }
  k_.memory.to_host(counts.data() + E_, device_counts + E_, Q_ * B * 4);
  int64_t arrival = 0;
  for (int j = 0; j < Q_; ++j) {
    s.etp_rows[j] = 0;
    for (int64_t b = j * B; b < (j + 1) * B; ++b) {
      s.block_rows[b] = static_cast<int64_t>(counts[E_ + b]);
      s.block_src[b] = arrival;
      arrival += s.block_rows[b];
      s.etp_rows[j] += s.block_rows[b];
    }
  }
  s.rows_in = arrival;
  s.rows_own = s.etp_rows[etp_rank_];
  s.own_offset = s.block_src[etp_rank_ * B];
  int64_t at = 0;
  for (int64_t e = 0; e < E_l_; ++e) {
    s.expert_rows[e] = 0;
    for (int64_t src = 0; src < Q_ * P_; ++src) {  // (ETP rank, EP source) pairs
      const int64_t b = src * E_l_ + e;
      s.block_dst[b] = at;
      at += s.block_rows[b];
      s.expert_rows[e] += s.block_rows[b];
    }
  }

  ep_->all_reduce(kept.data(), E_ + 1);
  s.stats.tokens_per_expert.assign(kept.begin(), kept.begin() + E_);
  s.stats.dropped = static_cast<int64_t>(kept[E_]);
}

void MoeLayer::to_expert_order(const Saved& s, float* dst, const float* src) const {
  for (int64_t b = 0; b < Q_ * P_ * E_l_; ++b) {
    k_.copy(dst + s.block_dst[b] * C_, src + s.block_src[b] * C_, s.block_rows[b] * C_);
  }
}

void MoeLayer::to_arrival_order(const Saved& s, float* dst, const float* src) const {
  for (int64_t b = 0; b < Q_ * P_ * E_l_; ++b) {
    k_.copy(dst + s.block_src[b] * C_, src + s.block_dst[b] * C_, s.block_rows[b] * C_);
  }
}

// The element counts and offsets of the EP all-to-all: S rows leave by destination rank, this
// rank's R_own arrive by source rank (offsets from its first row). The return trip swaps them.
void MoeLayer::row_counts(const Saved& s) {
  const int64_t base = etp_rank_ * P_ * E_l_;  // this ETP rank's first block
  int64_t at = 0;
  for (int r = 0; r < P_; ++r) {
    counts_out_[r] = s.send_rows[r] * C_;
    offsets_out_[r] = at * C_;
    at += s.send_rows[r];
    counts_in_[r] = 0;
    for (int64_t e = 0; e < E_l_; ++e) counts_in_[r] += s.block_rows[base + r * E_l_ + e] * C_;
    offsets_in_[r] = (s.block_src[base + r * E_l_] - s.own_offset) * C_;
  }
}

float* MoeLayer::to_experts(const Saved& s, const float* send) {
  float* rows = k_.reserve(arrival_, s.rows_in, C_);
  float* own = rows + s.own_offset * C_;
  row_counts(s);
  ep_->all_to_all_v(send, counts_out_.data(), offsets_out_.data(), own, counts_in_.data(),
                    offsets_in_.data());
  if (Q_ > 1) {
    for (int j = 0; j < Q_; ++j) {
      etp_counts_[j] = s.etp_rows[j] * C_;
      etp_offsets_[j] = s.block_src[j * P_ * E_l_] * C_;
    }
    etp_->all_gather_v(own, rows, etp_counts_.data(), etp_offsets_.data());  // in place
  }
  return rows;
}

void MoeLayer::from_experts(const Saved& s, const float* rows, float* recv) {
  const float* back = rows + s.own_offset * C_;
  if (Q_ > 1) {
    float* own = k_.reserve(own_rows_, s.rows_own, C_);
    for (int j = 0; j < Q_; ++j) etp_counts_[j] = s.etp_rows[j] * C_;
    etp_->reduce_scatter_v(rows, own, etp_counts_.data());
    back = own;
  }
  row_counts(s);
  ep_->all_to_all_v(back, counts_in_.data(), offsets_in_.data(), recv, counts_out_.data(),
                    offsets_out_.data());
}

}  // namespace tessel
