#include "tessel/model/moe/experts.h"

#include <fmt/format.h>

namespace tessel {

GroupedExperts::GroupedExperts(const LayerContext& ctx, const std::string& prefix, Rows rows, bool shared_act)
    : k_(ctx.k),
      C_(ctx.cfg.hidden_size),
      F_l_(ctx.cfg.expert_ffn_size() / ctx.moe.etp.size()),
      R_(rows.first),
      balanced_(rows.balanced),
      shared_act_(shared_act) {
  const int ep_rank = ctx.moe.ep.rank(), ep = ctx.moe.ep.size();
  const int etp_rank = ctx.moe.etp.rank(), etp = ctx.moe.etp.size();
  const int64_t C = C_, F = ctx.cfg.expert_ffn_size();
  const int64_t local = ctx.cfg.moe.num_experts / ep, first = ep_rank * local;
  const float in_std = ctx.cfg.init_method_std, out_std = output_init_std(ctx.cfg);
  // An expert's gate/up split by rows (dim 0) and down by columns (dim 1) over ETP.
  const Mlp::Split split = [&](int dim) {
    return ShardSpec{.dim = etp > 1 ? dim : -1,
                     .group = etp > 1 ? ShardGroup::ETP : ShardGroup::None,
                     .index = etp_rank, .count = etp, .expert_rank = ep_rank, .expert_ranks = ep};
  };
  experts_.reserve(local);
  for (int64_t e = first; e < first + local; ++e)
    experts_.emplace_back(k_, ctx.registry,
                          Mlp::Spec{.prefix = fmt::format("{}experts.{}.", prefix, e), .activation = Activation::SwiGlu,
                                    .C = C, .F = F, .F_l = F_l_, .split = split, .in_std = in_std,
                                    .out_std = out_std});
  if (shared_act_)
    ctx.buffers.shared.add_growing(act_shared_, {R_, F_l_}, "experts' activation", {RoutedRows::Received, balanced_});
}

std::vector<int> GroupedExperts::param_indices() const {
  std::vector<int> ids;
  for (const Mlp& e : experts_)
    for (int p : e.param_indices()) ids.push_back(p);
  return ids;
}

void GroupedExperts::list_saved(Saved& s, TensorList& buffers) const {
  const Growth rows{RoutedRows::Received, balanced_};
  buffers.add_growing(s.in, {R_, C_}, "experts' input rows", rows);
  buffers.add_growing(s.gate, {R_, F_l_}, "experts' gate", rows);
  buffers.add_growing(s.up, {R_, F_l_}, "experts' up", rows);
  if (!shared_act_) buffers.add_growing(s.act, {R_, F_l_}, "experts' activation", rows);
  buffers.add_growing(s.d_gate, {R_, F_l_}, "experts' gate gradient", rows);
  buffers.add_growing(s.d_up, {R_, F_l_}, "experts' up gradient", rows);
  buffers.add_growing(s.d_out, {R_, C_}, "experts' output gradient", rows);
}

MlpRows GroupedExperts::rows_of(Saved& s, int64_t first) {
  const int64_t f = first * F_l_;
  return {s.gate.data() + f, s.up.data() + f, act(s).data() + f, s.d_gate.data() + f,
          s.d_up.data() + f, s.d_out.data() + first * C_};
}

void GroupedExperts::recompute_act(Saved& s, int64_t R) {
  k_.swiglu_forward(k_.reserve(act_shared_, R, F_l_), s.gate.data(), s.up.data(), R * F_l_);
}

void GroupedExperts::forward(Saved& s, float* y, const std::vector<int64_t>& rows, int64_t R) {
  for (Tensor* t : {&s.gate, &s.up, &act(s)}) k_.reserve(*t, R, F_l_);
  int64_t o = 0;
  for (size_t e = 0; e < experts_.size(); ++e) {
    if (rows[e] > 0) experts_[e].forward_rows(rows_of(s, o), y + o * C_, s.in.data() + o * C_, rows[e]);
    o += rows[e];
  }
}

void GroupedExperts::backward_input(Saved& s, float* d_in, const std::vector<int64_t>& rows,
                                    int64_t R, float* d_act) {
  for (Tensor* t : {&s.d_gate, &s.d_up}) k_.reserve(*t, R, F_l_);
  k_.zero(d_in, R * C_);
  int64_t o = 0;
  for (size_t e = 0; e < experts_.size(); ++e) {
    if (rows[e] > 0)
      experts_[e].backward_input_rows(rows_of(s, o), d_in + o * C_, s.in.data() + o * C_, rows[e],
                                      d_act);
    o += rows[e];
  }
}

void GroupedExperts::backward_weight(Saved& s, const std::vector<int64_t>& rows) {
  int64_t o = 0;
  for (size_t e = 0; e < experts_.size(); ++e) {
    if (rows[e] > 0) experts_[e].backward_weight_rows(rows_of(s, o), s.in.data() + o * C_, rows[e]);
    o += rows[e];
  }
}

}  // namespace tessel
