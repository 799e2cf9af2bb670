#include "tessel/parallel/grad_sync.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace tessel {

GradSync::GradSync(const Kernels& k, ParamRegistry& params, ProcessGroups& groups,
                   GradSyncConfig config)
    : k_(k),
      params_(params),
      groups_(groups),
      config_(std::move(config)),
      dense_(k, params, groups.dp_cp(), config_.distributed_optimizer, config_.bucket_floats,
             [this](const Param& p) { return !config_.is_expert(p); }, config_.overlap),
      experts_(k, params, groups.edp(), config_.distributed_optimizer, config_.bucket_floats,
               config_.is_expert, config_.overlap) {
  owned_ = dense_.owned_ranges();
  for (const FlatRange& r : experts_.owned_ranges()) owned_.push_back(r);
  std::sort(owned_.begin(), owned_.end(),
            [](const FlatRange& a, const FlatRange& b) { return a.begin < b.begin; });
}

void GradSync::arm() {
  dense_.arm();
  experts_.arm();
}

void GradSync::grad_ready(int index) {
  Param& p = params_.params()[index];
  Comm& tp = groups_.tp();
  if (tp.size() > 1 && p.replicated() && (config_.sequence_parallel || p.grad_partial_over_tp))
    tp.all_reduce(p.grad, p.numel());
  if (index == config_.tied_owner) {
    // The last stage adds its copy's gradient only once its pipeline has run (finish): waiting
    // for that here would stall this stage's work still to come (a zero-bubble schedule's last
    // W's). Data parallelism takes the sum when it has arrived.
    tied_sum_ = groups_.embedding().all_reduce_async(p.grad, p.numel());
    return;
  }
  dense_.grad_ready(index);
  experts_.grad_ready(index);
}

void GradSync::finish() {
  if (config_.tied_copy >= 0) {
    Param& p = params_.params()[config_.tied_copy];
    groups_.embedding().all_reduce(p.grad, p.numel());
  }
  if (config_.tied_owner >= 0) {
    tied_sum_.wait();
    dense_.grad_ready(config_.tied_owner);
    experts_.grad_ready(config_.tied_owner);
  }
  dense_.finish_grad_reduction();
  experts_.finish_grad_reduction();
}

double GradSync::local_sum(const std::function<bool(const Param&)>& counted, const PieceSum& f) const {
  double sum = 0.0;
  for_each_piece(params_.params(), owned_, [&](const Param& p, int64_t first, int64_t n, int64_t) {
    if (counted(p)) sum = f(p, first, n, sum);
  });
  return sum;
}

// Every parameter once: dense TP shards summed over TP, TP-replicated ones from TP rank 0 only,
// the distributed optimizer's DP slices summed; experts (each rank its own experts, or their ETP
// slices) summed over the expert-model-parallel ranks ETP × EP and the expert-DP slices; then the
// stages summed (a tied embedding once: the last stage's copy is left out).
double GradSync::global_norm() const {
  double sq = stage_sq_sum();
  groups_.pp().all_reduce(&sq, 1);
  return std::sqrt(sq);
}

double GradSync::stage_sq_sum() const {
  return stage_sum([this](const Param& p, int64_t first, int64_t n, double sum) {
    return k_.sum_squares(p.grad + first, n, sum);
  });
}

double GradSync::stage_sum(const PieceSum& f) const {
  const std::vector<Param>& ps = params_.params();
  const bool tp_first = groups_.tp().rank() == 0;
  double sum = local_sum(
      [&](const Param& p) {
        return !config_.is_expert(p) && (tp_first || !p.replicated()) && &p - ps.data() != config_.tied_copy;
      },
      f);
  double sum_experts = local_sum(config_.is_expert, f);
  if (config_.distributed_optimizer) {
    groups_.dp_cp().all_reduce(&sum, 1);
    groups_.edp().all_reduce(&sum_experts, 1);
  }
  groups_.tp().all_reduce(&sum, 1);
  groups_.tp_ep().all_reduce(&sum_experts, 1);
  return sum + sum_experts;
}

double GradSync::params_norm() const {
  double sq = stage_sum([this](const Param& p, int64_t first, int64_t n, double sum) {
    return k_.sum_squares(p.value + first, n, sum);
  });
  groups_.pp().all_reduce(&sq, 1);
  return std::sqrt(sq);
}

double GradSync::grad_zeros() const {
  std::vector<float> host;  // the gradients may live on a device
  double zeros = stage_sum([&](const Param& p, int64_t first, int64_t n, double sum) {
    host.resize(n);
    k_.memory.to_host(host.data(), p.grad + first, n * static_cast<int64_t>(sizeof(float)));
    return sum + static_cast<double>(std::count(host.begin(), host.end(), 0.0f));
  });
  groups_.pp().all_reduce(&zeros, 1);
  return zeros;
}

void GradSync::gather_params() {
  dense_.gather_params();
  experts_.gather_params();
}

}  // namespace tessel
