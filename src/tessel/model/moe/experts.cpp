#include "tessel/model/moe/experts.h"

#include <fmt/format.h>

namespace tessel {

GroupedExperts::GroupedExperts(const Kernels& k, ParamRegistry& registry, const std::string& prefix,
                               int64_t C, int64_t F, int64_t first, int64_t local, int ep_rank,
                               int ep, int etp_rank, int etp, float out_std)
    : k_(k), C_(C), F_l_(F / etp) {
  // An expert's gate/up split by rows (dim 0) and down by columns (dim 1) over ETP.
  const Mlp::Split split = [&](int dim) {
    return ShardSpec{.dim = etp > 1 ? dim : -1,
                     .group = etp > 1 ? ShardGroup::ETP : ShardGroup::None,
                     .index = etp_rank, .count = etp, .expert_rank = ep_rank, .expert_ranks = ep};
  };
  experts_.reserve(local);
  for (int64_t e = first; e < first + local; ++e)
    experts_.emplace_back(k, registry, fmt::format("{}experts.{}.", prefix, e), Activation::SwiGlu,
                          C, F, F_l_, split, out_std);
}

std::vector<int> GroupedExperts::param_indices() const {
  std::vector<int> ids;
  for (const Mlp& e : experts_)
    for (int p : e.param_indices()) ids.push_back(p);
  return ids;
}

GroupedExperts::Saved GroupedExperts::make_saved(int64_t R) const {
  Saved s;
  for (Tensor* t : {&s.in, &s.d_out}) *t = k_.zeros({R, C_});
  for (Tensor* t : {&s.gate, &s.up, &s.act, &s.d_gate, &s.d_up}) *t = k_.zeros({R, F_l_});
  return s;
}

MlpRows GroupedExperts::rows_of(Saved& s, int64_t first) const {
  const int64_t f = first * F_l_;
  return {s.gate.data() + f, s.up.data() + f, s.act.data() + f, s.d_gate.data() + f,
          s.d_up.data() + f, s.d_out.data() + first * C_};
}

void GroupedExperts::forward(Saved& s, float* y, const std::vector<int64_t>& rows, int64_t R) {
  for (Tensor* t : {&s.gate, &s.up, &s.act}) k_.reserve(*t, R, F_l_);
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

void GroupedExperts::backward_weight(Saved& s, const std::vector<int64_t>& rows) const {
  int64_t o = 0;
  for (size_t e = 0; e < experts_.size(); ++e) {
    if (rows[e] > 0) experts_[e].backward_weight_rows(rows_of(s, o), s.in.data() + o * C_, rows[e]);
    o += rows[e];
  }
}

}  // namespace tessel
