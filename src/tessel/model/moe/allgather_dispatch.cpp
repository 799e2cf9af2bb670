// The MoE layer's all-gather token dispatch (allgather_dispatch.h), as Megatron's
// MoEAllGatherTokenDispatcher.
#include "tessel/model/moe/allgather_dispatch.h"

#include <algorithm>

#include "tessel/core/error.h"

namespace tessel {

AllGatherDispatcher::AllGatherDispatcher(const LayerContext& ctx, int64_t max_tokens)
    : k_(ctx.k),
      C_(ctx.cfg.hidden_size),
      E_(ctx.cfg.moe.num_experts),
      topk_(ctx.cfg.moe.topk),
      E_l_(E_ / ctx.moe.ep.size()),
      first_expert_(ctx.moe.ep.rank() * E_l_),
      max_tokens_(std::max<int64_t>(max_tokens, 1)),
      etp_size_(ctx.moe.etp.size()),
      group_(communicating(ctx.moe.tp_ep, ctx.k)),
      ep_(communicating(ctx.moe.ep, ctx.k)),
      G_(group_.size()) {
  TESSEL_CHECK(G_ == ctx.moe.ep.size() * etp_size_,
               "MoE all-gather dispatcher: a group of {} ranks for EP {} × ETP {}", G_, ctx.moe.ep.size(),
               etp_size_);
  TensorList& scratch = ctx.buffers.scratch;
  const int64_t gathered = max_tokens_ * G_, assignments = max_tokens_ * topk_;
  scratch.add(rows_, {gathered, C_}, "all-gather dispatch rows");
  scratch.add(own_rows_, {max_tokens_, C_}, "all-gather dispatch rows' gradient");
  scratch.add(source_, {assignments, C_}, "all-gather dispatch source rows");
  scratch.add(d_source_, {assignments, C_}, "all-gather dispatch source rows' gradient");
  scratch.add(own_slots_, {assignments}, "all-gather dispatch own slots", DType::I32);
  scratch.add(cursor_, {E_}, "all-gather dispatch expert cursors", DType::I32);
  scratch.add(choices_, {2 * gathered * topk_}, "all-gather dispatch choices");
  scratch.add(counts_, {(1 + G_) * (E_ + 1)}, "all-gather dispatch row counts");
  host_counts_.resize(G_ * (E_ + 1));
  host_first_.resize(E_);
  kept_.resize(E_ + 1);
  counts_v_.resize(G_);
  offsets_v_.resize(G_);
}

// The gathered assignments of every rank; the experts' rows grow with the load (R is N·k·ETP at a
// balanced one).
void AllGatherDispatcher::list_saved(Saved& s, TensorList& buffers) const {
  const int64_t assignments = max_tokens_ * G_ * topk_, balanced = max_tokens_ * topk_ * etp_size_;
  buffers.add(s.slot_row, {assignments}, "all-gather dispatch slots", DType::I32);
  buffers.add(s.probs, {assignments}, "all-gather dispatch probabilities");
  buffers.add_growing(s.combined, {balanced, C_}, "combined expert outputs", {RoutedRows::Received, balanced});
  s.rank_rows.resize(G_);
  s.rank_first.resize(G_);
  for (auto* v : {&s.block_rows, &s.block_src, &s.block_dst}) v->resize(G_ * E_l_);
  s.expert_rows.resize(E_l_);
}

// The kept rows per expert and N of every rank first (the gathers' sizes, the blocks), then every
// rank's slots and probabilities.
void AllGatherDispatcher::plan(Saved& s, const TopKRouter::Saved& routing, const int32_t* keep, int64_t N,
                               RouterStats& stats) {
  const int64_t W = E_ + 1, n = N * topk_;  // a rank's counts; its assignments
  float* counts = counts_.data();          // (E + 1) this rank's, then (G·(E + 1)) every rank's
  k_.moe_count_assignments(counts, routing.experts.ints(), keep, n, E_);
  const float rows_here = static_cast<float>(N);
  k_.memory.from_host(counts + E_, &rows_here, 4);
  group_.comm().all_gather(counts, counts + W, W);
  k_.memory.to_host(host_counts_.data(), counts + W, G_ * W * 4);
  int64_t gathered = 0;
  for (int r = 0; r < G_; ++r) {
    const float* rank = host_counts_.data() + r * W;
    s.rank_rows[r] = static_cast<int64_t>(rank[E_]);
    TESSEL_CHECK(s.rank_rows[r] <= max_tokens_, "MoE: rank {} of the all-gather routes {} rows, over {}", r,
                 s.rank_rows[r], max_tokens_);
    s.rank_first[r] = gathered;
    gathered += s.rank_rows[r];
    int64_t at = 0;  // rank r's dispatch order: expert by expert
    for (int64_t e = 0; e < E_; ++e) {
      const int64_t local = e - first_expert_, b = r * E_l_ + local;
      if (local >= 0 && local < E_l_) {
        s.block_rows[b] = static_cast<int64_t>(rank[e]);
        s.block_src[b] = at;
      }
      at += static_cast<int64_t>(rank[e]);
    }
  }
  s.rows_gathered = gathered;
  TESSEL_CHECK(gathered * topk_ < (int64_t{1} << 24), "MoE: {} assignments to gather (slots travel as floats)",
               gathered * topk_);
  int64_t at = 0;
  for (int64_t e = 0; e < E_l_; ++e) {
    s.expert_rows[e] = 0;
    for (int r = 0; r < G_; ++r) {
      const int64_t b = r * E_l_ + e;
      s.block_dst[b] = at;
      at += s.block_rows[b];
      s.expert_rows[e] += s.block_rows[b];
    }
  }
  s.rows_in = at;

  // This rank's slots, then [slots | probs] of every rank, unpacked rank by rank.
  const int me = group_.rank();
  const float* mine = host_counts_.data() + me * W;
  double kept_total = 0;
  for (int64_t e = 0; e < E_; ++e) {
    host_first_[e] = static_cast<int32_t>(kept_total);
    kept_[e] = mine[e];
    kept_total += mine[e];
  }
  kept_[E_] = static_cast<double>(n) - kept_total;
  k_.memory.from_host(cursor_.ints(), host_first_.data(), E_ * 4);
  k_.moe_assign_slots(own_slots_.ints(), cursor_.ints(), routing.experts.ints(), keep, n);
  float* choices = choices_.data();
  for (int r = 0; r < G_; ++r) {
    counts_v_[r] = 2 * s.rank_rows[r] * topk_;
    offsets_v_[r] = 2 * s.rank_first[r] * topk_;
  }
  k_.moe_pack_choices(choices + offsets_v_[me], own_slots_.ints(), routing.probs.data(), n);
  group_.comm().all_gather_v(choices + offsets_v_[me], choices, counts_v_.data(), offsets_v_.data());  // in place
  for (int r = 0; r < G_; ++r) {
    const int64_t first = s.rank_first[r] * topk_;
    if (s.rank_rows[r] > 0)
      k_.moe_unpack_choices(s.slot_row.ints() + first, s.probs.data() + first, choices + 2 * first, 1,
                            s.rank_rows[r] * topk_);
  }

  ep_.comm().all_reduce(kept_.data(), E_ + 1);
  stats.tokens_per_expert.assign(kept_.begin(), kept_.begin() + E_);
  stats.dropped = static_cast<int64_t>(kept_[E_]);
}

void AllGatherDispatcher::gather(const Saved& s, float* dst, const float* src, int64_t per_row) {
  for (int r = 0; r < G_; ++r) {
    offsets_v_[r] = s.rank_first[r] * per_row;
    counts_v_[r] = s.rank_rows[r] * per_row;
  }
  group_.comm().all_gather_v(src, dst, counts_v_.data(), offsets_v_.data());
}

void AllGatherDispatcher::reduce_scatter(const Saved& s, float* dst, const float* src, int64_t per_row) {
  for (int r = 0; r < G_; ++r) counts_v_[r] = s.rank_rows[r] * per_row;
  group_.comm().reduce_scatter_v(src, dst, counts_v_.data());
}

float* AllGatherDispatcher::source_rows(const Saved& s, int r, const float* expert_rows) {
  float* source = source_.data();
  k_.zero(source, s.rank_rows[r] * topk_ * C_);
  for (int64_t e = 0; e < E_l_; ++e) {
    const int64_t b = r * E_l_ + e;
    k_.copy(source + s.block_src[b] * C_, expert_rows + s.block_dst[b] * C_, s.block_rows[b] * C_);
  }
  return source;
}

void AllGatherDispatcher::to_expert_order(const Saved& s, int r, float* expert_rows, const float* source) const {
  for (int64_t e = 0; e < E_l_; ++e) {
    const int64_t b = r * E_l_ + e;
    k_.copy(expert_rows + s.block_dst[b] * C_, source + s.block_src[b] * C_, s.block_rows[b] * C_);
  }
}

// ---- forward ---------------------------------------------------------------------------------

// Each source's gathered rows permuted into its dispatch order; this rank's experts' blocks taken.
void AllGatherDispatcher::dispatch(Saved& s, float* expert_in, const float* x, int64_t /*N*/) {
  float* rows = rows_.data();  // (N_g, C)
  gather(s, rows, x, C_);
  for (int r = 0; r < G_; ++r) {
    if (s.rank_rows[r] == 0) continue;
    const int64_t first = s.rank_first[r];
    k_.moe_permute_forward(source_.data(), rows + first * C_, s.slot_row.ints() + first * topk_, s.rank_rows[r],
                           topk_, C_);
    to_expert_order(s, r, expert_in, source_.data());
  }
}

// Each gathered row's share from this rank's experts, Σ over its choices held here of
// probs · output (the other choices read zero rows), summed over the group back on the row's own
// rank. The probabilities are the gathered ones.
void AllGatherDispatcher::combine(Saved& s, float* out, const float* y, const float* /*probs*/,
                                  int64_t /*N*/) {
  float* combined = k_.reserve(s.combined, s.rows_in, C_);
  k_.copy(combined, y, s.rows_in * C_);
  float* partial = rows_.data();  // (N_g, C)
  for (int r = 0; r < G_; ++r) {
    if (s.rank_rows[r] == 0) continue;
    const int64_t first = s.rank_first[r];
    k_.moe_unpermute_forward(partial + first * C_, source_rows(s, r, combined), s.probs.data() + first * topk_,
                             s.slot_row.ints() + first * topk_, s.rank_rows[r], topk_, C_);
  }
  reduce_scatter(s, out, partial, C_);
}

// ---- backward --------------------------------------------------------------------------------

// Combine's backward: dout gathered as the rows were; d(probs) of the choices held here (0 for the
// others, partial over ETP), summed back over the group; d(y) = probs · dout.
void AllGatherDispatcher::combine_backward(const Saved& s, float* d_probs, float* d_y, const float* dout,
                                           const float* /*probs*/, int64_t /*N*/) {
  float* rows = rows_.data();  // (N_g, C)
  gather(s, rows, dout, C_);
  float* d_probs_gathered = choices_.data();  // (N_g·k)
  for (int r = 0; r < G_; ++r) {
    if (s.rank_rows[r] == 0) continue;
    const int64_t first = s.rank_first[r];
    const float* source = source_rows(s, r, s.combined.data());
    k_.moe_unpermute_backward(d_probs_gathered + first * topk_, d_source_.data(), rows + first * C_, source,
                              s.probs.data() + first * topk_, s.slot_row.ints() + first * topk_, s.rank_rows[r],
                              topk_, C_);
    to_expert_order(s, r, d_y, d_source_.data());
  }
  reduce_scatter(s, d_probs, d_probs_gathered, topk_);
}

// Dispatch's backward: each gathered row's gradient from this rank's experts (partial over ETP;
// the other choices read zero rows), summed over the group back on the row's own rank.
void AllGatherDispatcher::dispatch_backward(const Saved& s, float* dx, const float* d_expert_in, int64_t N) {
  float* rows = rows_.data();  // (N_g, C)
  k_.zero(rows, s.rows_gathered * C_);
  for (int r = 0; r < G_; ++r) {
    if (s.rank_rows[r] == 0) continue;
    const int64_t first = s.rank_first[r];
    k_.moe_permute_backward(rows + first * C_, source_rows(s, r, d_expert_in), s.slot_row.ints() + first * topk_,
                            s.rank_rows[r], topk_, C_);
  }
  float* own = own_rows_.data();  // (N, C)
  reduce_scatter(s, own, rows, C_);
  k_.residual_forward(dx, dx, own, N * C_);
}

}  // namespace tessel
