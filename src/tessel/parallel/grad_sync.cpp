#include "tessel/parallel/grad_sync.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace tessel {

GradSync::GradSync(const Kernels& k, ParamRegistry& params, ProcessGroups& groups,
                   GradSyncConfig config)
    : k_(k), params_(params), groups_(groups), config_(std::move(config)) {
  const ShardingStrategy s = config_.sharding;
  if (s == ShardingStrategy::NoShard || s == ShardingStrategy::Optim) {
    const bool distributed = s == ShardingStrategy::Optim;
    dense_.emplace(k, params, groups.dp_cp(), distributed, config_.bucket_floats,
                   [this](const Param& p) { return !config_.is_expert(p); }, config_.overlap);
    experts_.emplace(k, params, groups.edp(), distributed, config_.bucket_floats, config_.is_expert,
                     config_.overlap);
    owned_ = dense_->owned_ranges();
    for (const FlatRange& r : experts_->owned_ranges()) owned_.push_back(r);
    std::sort(owned_.begin(), owned_.end(),
              [](const FlatRange& a, const FlatRange& b) { return a.begin < b.begin; });
    return;
  }
  std::vector<int> alone;
  for (int i : {config_.tied_owner, config_.tied_copy})
    if (i >= 0) alone.push_back(i);
  sharded_ = std::make_unique<FullySharded>(
      k, params, groups.dp_cp(), groups.edp(), config_.units, config_.chunk_first_unit,
      FullyShardedConfig{.shard_params = s == ShardingStrategy::OptimGradsParams,
                         .reshard_after_forward = config_.reshard_after_forward,
                         .is_expert = config_.is_expert,
                         .alone = alone});
  owned_ = sharded_->owned_ranges();
}

void GradSync::arm() {
  if (sharded_) return;
  dense_->arm();
  experts_->arm();
}

void GradSync::grad_ready(int index) {
  if (sharded_) return;  // each unit's gradients are reduced as the chunk writes them
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
  dense_->grad_ready(index);
  experts_->grad_ready(index);
}

void GradSync::finish() {
  if (sharded_) {
    sharded_->finish_grad_reduction();
    sum_reduced_pieces();
    return;
  }
  if (config_.tied_copy >= 0) {
    Param& p = params_.params()[config_.tied_copy];
    groups_.embedding().all_reduce(p.grad, p.numel());
  }
  if (config_.tied_owner >= 0) {
    tied_sum_.wait();
    dense_->grad_ready(config_.tied_owner);
    experts_->grad_ready(config_.tied_owner);
  }
  dense_->finish_grad_reduction();
  experts_->finish_grad_reduction();
}

// The same slices on every TP rank (their buckets hold the same parameters alike), and a tied
// embedding's owner and copy each alone in a bucket of the same size: the pieces match.
void GradSync::sum_reduced_pieces() {
  Comm& tp = groups_.tp();
  for_each_piece(params_.params(), owned_, [&](const Param& p, int64_t first, int64_t n, int64_t) {
    const int index = static_cast<int>(&p - params_.params().data());
    if (tp.size() > 1 && p.replicated() && (config_.sequence_parallel || p.grad_partial_over_tp))
      tp.all_reduce(p.grad + first, n);
    if (index == config_.tied_owner || index == config_.tied_copy) groups_.embedding().all_reduce(p.grad + first, n);
  });
}

GradSync::StateBytes GradSync::take_state_bytes() {
  StateBytes b;
  for (const FlatRange& r : owned_) b.optimizer += 8.0 * static_cast<double>(r.end - r.begin);
  if (!sharded_) {
    b.params = b.grads = 4.0 * static_cast<double>(params_.numel());
    return b;
  }
  const FullySharded::Held held = sharded_->take_held();
  b.params = static_cast<double>(held.params);
  b.grads = static_cast<double>(held.grads);
  b.gathered_peak = static_cast<double>(held.gathered_peak);
  return b;
}

void GradSync::zero_grads() {
  if (sharded_) sharded_->zero_grads();
  else params_.zero_grads();
}

void GradSync::scale_grads(float factor) {
  for (const FlatRange& r : owned_) k_.scale(params_.grads() + r.begin, factor, r.end - r.begin);
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
  if (sharded_optimizer()) {
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
  if (sharded_) {
    sharded_->gather_params();
    return;
  }
  dense_->gather_params();
  experts_->gather_params();
}

}  // namespace tessel
