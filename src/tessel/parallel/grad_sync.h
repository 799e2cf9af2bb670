// Every gradient reduction of a training step, and the global gradient norm, in one place.
//
// Gradients accumulate over the microbatches of one rank's share of the global batch (the loss is
// already scaled by 1 / tokens of the whole batch); then, as Megatron sums them:
//   TP-replicated parameters (norms, row-parallel biases, routers): under sequence parallel each
//     TP rank's gradient comes from its own rows alone (a QK-norm weight's from its own heads
//     alone, always: Param::grad_partial_over_tp), so it is summed over TP as soon as backward
//     has finished it, before data parallelism sees it;
//   a tied embedding (GPT-2's wte, on the first and the last pipeline stage): both copies start
//     equal and stay equal by summing their gradients over the embedding group — the owner's
//     sum started as soon as backward has finished it, the last stage's copy's after the
//     pipeline has run; data parallelism takes the owner's once the sum is in;
//   data parallel: dense gradients summed over DP × CP (the ranks that saw other tokens of the
//     same batch), experts' over expert-DP (the ranks holding the same experts), each by its own
//     buckets (parallel/data_parallel.h), during backward with --overlap-grad-reduce; the
//     distributed optimizer reduce-scatters them and all-gathers the updated parameters; fully
//     sharded data parallelism (parallel/fully_sharded.h) reduce-scatters each weight unit's as
//     its backward writes them, and sums the TP-replicated and tied pieces above on the reduced
//     slices instead (a sum of slices is the slice of the sum).
// The global norm then counts every parameter exactly once over all ranks.
//
// This layer does not know the model: which parameters are experts and where a tied embedding
// sits come from the caller.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "tessel/core/params.h"
#include "tessel/kernels/kernels.h"
#include "tessel/parallel/data_parallel.h"
#include "tessel/parallel/fully_sharded.h"
#include "tessel/parallel/groups.h"

namespace tessel {

struct GradSyncConfig {
  bool sequence_parallel = false;      // --sequence-parallel
  // --data-parallel-sharding-strategy: no_shard (DDP), optim (--use-distributed-optimizer),
  // optim_grads or optim_grads_params (fully sharded, over `units`).
  ShardingStrategy sharding = ShardingStrategy::NoShard;
  bool reshard_after_forward = true;   // resolved (parallel/fully_sharded.h)
  std::vector<WeightUnit> units;       // every chunk's, in the rank's chunk order
  std::vector<int> chunk_first_unit;
  int64_t bucket_floats = int64_t{1} << 22;  // --ddp-bucket-size
  bool overlap = false;                // --overlap-grad-reduce
  // Routed experts (required): reduced over expert-DP, counted in the norm over ETP × EP.
  std::function<bool(const Param&)> is_expert;
  // Registry indices of a tied embedding (-1: none): the copy this rank owns and reports as it
  // finishes (a first stage with a last stage elsewhere), and the copy it holds for the head (a
  // last stage without the embedding), which the norm does not count.
  int tied_owner = -1, tied_copy = -1;
};

class GradSync {
 public:
  // `params` finalized; `groups` this rank's communicators. Both must outlive the object.
  GradSync(const Kernels& k, ParamRegistry& params, ProcessGroups& groups, GradSyncConfig config);

  // The flat ranges this rank's optimizer updates, ascending: everything, or with the
  // distributed optimizer its slice of every bucket.
  const std::vector<FlatRange>& owned_ranges() const { return owned_; }

  // The pipeline's hooks (pipeline/executor.h): arm() before the last microbatch's backward,
  // grad_ready(index) when that backward has finished parameter `index`'s gradient.
  void arm();
  void grad_ready(int index);
  // After the pipeline has run: the tied copy, and every bucket not reduced yet; waits for all.
  void finish();
  // The L2 norm of the whole model's reduced gradients (the owned ones on each rank), the same
  // on every rank. Collective.
  double global_norm() const;
  // Its square before the sum over the pipeline stages: Σ g² of this stage's gradients, the
  // same on every rank of the stage. Collective within the stage only (TP, DP, EP groups).
  double stage_sq_sum() const;
  // After the optimizer step, with the distributed optimizer: every rank gets every updated
  // parameter. Collective.
  void gather_params();
  // Gradients zeroed for a new step (discarded, fully sharded).
  void zero_grads();
  // The owned gradients times `factor` (a loss scale undone).
  void scale_grads(float factor);
  // Fully sharded only (nullptr otherwise): the hooks the chunks call around each unit, and the
  // mechanism itself (gather_all before a save, shard_values after the values are set).
  FullySharded* fully_sharded() { return sharded_.get(); }
  // This rank's memory for the model's state, in bytes: the parameters and gradients it keeps,
  // Adam's two moments of its owned ranges, and (fully sharded) at most how much of the units
  // gathered whole at once since the last call.
  struct StateBytes {
    double params = 0, grads = 0, optimizer = 0, gathered_peak = 0;
  };
  StateBytes take_state_bytes();
  // Whether the optimizer's state is sharded (any strategy but no_shard).
  bool sharded_optimizer() const { return config_.sharding != ShardingStrategy::NoShard; }
  // Counted as the gradient norm counts, every parameter once: the L2 norm of the parameters
  // (Megatron's --log-params-norm; after gather_params), and the zeros among the reduced
  // gradients (--log-num-zeros-in-grad). The same on every rank. Collective.
  double params_norm() const;
  double grad_zeros() const;

 private:
  // Adds f(p, first, n) of a piece of parameter p's flat storage to `sum`.
  using PieceSum = std::function<double(const Param& p, int64_t first, int64_t n, double sum)>;
  // The sum over this rank's owned pieces of the parameters `counted` accepts, in flat order.
  double local_sum(const std::function<bool(const Param&)>& counted, const PieceSum& f) const;
  // The sum over this stage's parameters, each once (stage_sq_sum's rule). Collective in the stage.
  double stage_sum(const PieceSum& f) const;

  const Kernels& k_;
  ParamRegistry& params_;
  ProcessGroups& groups_;
  GradSyncConfig config_;
  // Sums the TP-replicated and tied pieces of the owned, reduced gradients (fully sharded).
  void sum_reduced_pieces();

  std::optional<DataParallel> dense_, experts_;  // no_shard and optim
  std::unique_ptr<FullySharded> sharded_;        // optim_grads and optim_grads_params
  std::vector<FlatRange> owned_;
  Request tied_sum_;  // the tied embedding's sum over the embedding group, on its owner
};

}  // namespace tessel
