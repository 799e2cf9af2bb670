// The MoE layer's token dispatch (dispatch.h), as Megatron's MoEAlltoAllTokenDispatcher.
#include "tessel/model/moe/dispatch.h"

#include <algorithm>

#include "tessel/core/error.h"

namespace tessel {

TokenDispatcher::TokenDispatcher(const LayerContext& ctx, int64_t max_tokens, int64_t routed_rows)
    : k_(ctx.k),
      C_(ctx.cfg.hidden_size),
      E_(ctx.cfg.moe.num_experts),
      topk_(ctx.cfg.moe.topk),
      E_l_(E_ / ctx.moe.ep.size()),
      first_expert_(ctx.moe.ep.rank() * E_l_),
      max_tokens_(std::max<int64_t>(max_tokens, 1)),
      routed_rows_(routed_rows),
      pad_(ctx.cfg.moe.pad_to_capacity),
      ep_(communicating(ctx.moe.ep, ctx.k)),
      etp_(communicating(ctx.moe.etp, ctx.k)),
      P_(ep_.size()),
      Q_(etp_.size()),
      etp_rank_(etp_.rank()) {
  TensorList& scratch = ctx.buffers.scratch;
  // routed_rows leave this rank and as many reach each ETP rank, which takes them all; N·k of
  // them at a balanced load (the growth's measure).
  const int64_t rows = routed_rows_, balanced = max_tokens_ * topk_;
  scratch.add_growing(send_, {rows, C_}, "dispatch rows out", {RoutedRows::Sent, balanced});
  scratch.add_growing(arrival_, {rows * Q_, C_}, "dispatch rows in", {RoutedRows::Received, balanced * Q_});
  if (Q_ > 1)
    scratch.add_growing(own_rows_, {rows, C_}, "dispatch rows summed over ETP", {RoutedRows::Received, balanced});
  scratch.add(row_cursor_, {E_}, "dispatch expert cursors", DType::I32);
  first_rows_.resize(E_);
  scratch.add(count_buffer_, {E_ + Q_ * P_ * E_l_}, "dispatch row counts");
  host_counts_.resize(E_ + Q_ * P_ * E_l_);
  kept_.resize(E_ + 1);
  for (auto* v : {&counts_out_, &counts_in_, &offsets_out_, &offsets_in_}) v->resize(P_);
  etp_counts_.resize(Q_);
  etp_offsets_.resize(Q_);
}

// Routed rows: routed_rows leave this rank (dropless routing may bring more than N·k: the
// combined rows grow on first need); each of the N·k assignments has a slot.
void TokenDispatcher::list_saved(Saved& s, TensorList& buffers) const {
  const int64_t rows = max_tokens_ * topk_;
  buffers.add(s.slot_row, {rows}, "dispatch rows' slots", DType::I32);
  s.send_rows.resize(P_);
  for (auto* v : {&s.block_rows, &s.block_src, &s.block_dst}) v->resize(Q_ * P_ * E_l_);
  s.expert_rows.resize(E_l_);
  s.etp_rows.resize(Q_);
  buffers.add_growing(s.combined, {routed_rows_, C_}, "combined expert outputs", {RoutedRows::Sent, rows});
}

// The counts per (rank, expert) travel first, so each rank learns what will arrive from whom,
// then over ETP what its ETP peers received; then the statistics are summed over EP.
void TokenDispatcher::plan(Saved& s, const TopKRouter::Saved& routing, const int32_t* keep, int64_t N,
                           RouterStats& stats) {
  const int32_t* experts = routing.experts.ints();
  const int64_t capacity = routing.capacity;
  std::vector<float>& counts = host_counts_;   // (E) rows per expert out, then (ETP·EP·E_l) in
  std::vector<double>& kept = kept_;           // (E + 1) kept per expert, then the dropped
  float* device_counts = count_buffer_.data();
  k_.moe_count_assignments(device_counts, experts, keep, N * topk_, E_);
  k_.memory.to_host(counts.data(), device_counts, E_ * 4);
  double kept_total = 0;
  for (int e = 0; e < E_; ++e) {
    kept[e] = counts[e];
    kept_total += counts[e];
  }
  kept[E_] = static_cast<double>(N * topk_) - kept_total;
  const int64_t pad = pad_ ? capacity : -1;
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
  k_.moe_assign_slots(s.slot_row.ints(), row_cursor_.ints(), experts, keep, N * topk_);
  k_.memory.from_host(device_counts, counts.data(), E_ * 4);

  // Counts first: rank r receives the E_l counts of its experts from every EP rank, into its
  // ETP rank's place; the ETP group's ranks then gather each other's.
  const int64_t B = P_ * E_l_;  // blocks one rank receives
  float* own = device_counts + E_ + etp_rank_ * B;
  for (int r = 0; r < P_; ++r) {
    counts_out_[r] = counts_in_[r] = E_l_;
    offsets_out_[r] = offsets_in_[r] = r * E_l_;
  }
  ep_.comm().all_to_all_v(device_counts, counts_out_.data(), offsets_out_.data(), own,
                    counts_in_.data(), offsets_in_.data());
  if (Q_ > 1) {
    for (int j = 0; j < Q_; ++j) {
      etp_counts_[j] = B;
      etp_offsets_[j] = j * B;
    }
    etp_.comm().all_gather_v(own, device_counts + E_, etp_counts_.data(), etp_offsets_.data());
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

  ep_.comm().all_reduce(kept.data(), E_ + 1);
  stats.tokens_per_expert.assign(kept.begin(), kept.begin() + E_);
  stats.dropped = static_cast<int64_t>(kept[E_]);
}

void TokenDispatcher::to_expert_order(const Saved& s, float* dst, const float* src) const {
  for (int64_t b = 0; b < Q_ * P_ * E_l_; ++b) {
    k_.copy(dst + s.block_dst[b] * C_, src + s.block_src[b] * C_, s.block_rows[b] * C_);
  }
}

void TokenDispatcher::to_arrival_order(const Saved& s, float* dst, const float* src) const {
  for (int64_t b = 0; b < Q_ * P_ * E_l_; ++b) {
    k_.copy(dst + s.block_src[b] * C_, src + s.block_dst[b] * C_, s.block_rows[b] * C_);
  }
}

void TokenDispatcher::row_counts(const Saved& s) {
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

float* TokenDispatcher::to_experts(const Saved& s, const float* send) {
  float* rows = k_.reserve(arrival_, s.rows_in, C_);
  float* own = rows + s.own_offset * C_;
  row_counts(s);
  ep_.comm().all_to_all_v(send, counts_out_.data(), offsets_out_.data(), own, counts_in_.data(),
                    offsets_in_.data());
  if (Q_ > 1) {
    for (int j = 0; j < Q_; ++j) {
      etp_counts_[j] = s.etp_rows[j] * C_;
      etp_offsets_[j] = s.block_src[j * P_ * E_l_] * C_;
    }
    etp_.comm().all_gather_v(own, rows, etp_counts_.data(), etp_offsets_.data());  // in place
  }
  return rows;
}

void TokenDispatcher::from_experts(const Saved& s, const float* rows, float* recv) {
  const float* back = rows + s.own_offset * C_;
  if (Q_ > 1) {
    float* own = k_.reserve(own_rows_, s.rows_own, C_);
    for (int j = 0; j < Q_; ++j) etp_counts_[j] = s.etp_rows[j] * C_;
    etp_.comm().reduce_scatter_v(rows, own, etp_counts_.data());
    back = own;
  }
  row_counts(s);
  ep_.comm().all_to_all_v(back, counts_in_.data(), offsets_in_.data(), recv, counts_out_.data(),
                    offsets_out_.data());
}

// The send buffer in dispatch order; padding rows stay zero.
float* TokenDispatcher::send_buffer(const Saved& s) {
  float* send = k_.reserve(send_, s.rows_out, C_);
  if (pad_) k_.zero(send, s.rows_out * C_);
  return send;
}

void TokenDispatcher::dispatch(Saved& s, float* expert_in, const float* x, int64_t N) {
  float* send = send_buffer(s);
  k_.moe_permute_forward(send, x, s.slot_row.ints(), N, topk_, C_);
  to_expert_order(s, expert_in, to_experts(s, send));
}

void TokenDispatcher::combine(Saved& s, float* out, const float* y, const float* probs,
                              int64_t N) {
  float* arrival = k_.reserve(arrival_, s.rows_in, C_);
  to_arrival_order(s, arrival, y);
  float* combined = k_.reserve(s.combined, s.rows_out, C_);
  from_experts(s, arrival, combined);
  k_.moe_unpermute_forward(out, combined, probs, s.slot_row.ints(), N, topk_, C_);
}

// Combine's backward: d(probs[n, j]) = dout[n] · y, d(y) = probs[n, j] · dout[n], in dispatch
// order, then to the experts as the forward's rows went.
void TokenDispatcher::combine_backward(const Saved& s, float* d_probs, float* d_y,
                                       const float* dout, const float* probs, int64_t N) {
  float* send = send_buffer(s);
  k_.moe_unpermute_backward(d_probs, send, dout, s.combined.data(), probs, s.slot_row.ints(), N,
                            topk_, C_);
  to_expert_order(s, d_y, to_experts(s, send));
}

void TokenDispatcher::dispatch_backward(const Saved& s, float* dx, const float* d_expert_in,
                                        int64_t N) {
  float* arrival = k_.reserve(arrival_, s.rows_in, C_);
  to_arrival_order(s, arrival, d_expert_in);
  float* send = k_.reserve(send_, s.rows_out, C_);
  from_experts(s, arrival, send);
  k_.moe_permute_backward(dx, send, s.slot_row.ints(), N, topk_, C_);
}

}  // namespace tessel
