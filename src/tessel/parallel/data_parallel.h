// Data parallelism's gradient reduction, in one place. Every DP rank computes gradients on its
// share of the global batch; they are summed over the DP group (the loss is already scaled by
// 1 / tokens of the whole global batch), bucket by bucket. As Megatron's DDP: by default every
// bucket is reduced after the backward pass; with --overlap-grad-reduce each bucket's
// non-blocking reduction starts as soon as the last microbatch's backward has finished every
// gradient in it, overlapping the rest of the backward pass. On CPU ranks the reduction's work
// runs on the core that computes anyway (Open MPI progresses a non-blocking all-reduce only
// inside MPI calls), so overlapping pays only where a rank would otherwise wait for a slower
// peer; on the small config the two measure alike (bench/RESULTS.md).
//
// Buckets are runs of consecutive parameters of the registry's flat gradient buffer, filled in
// backward order (last parameters first) up to `bucket_floats`.
//   plain DP:               all-reduce each bucket in place;
//   distributed optimizer:  reduce-scatter each bucket (padded to a multiple of DP) so that DP
//                           rank r ends with the summed r-th slice, which it alone updates;
//                           after the step, all-gather the updated parameters (ZeRO-1).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "tessel/comm/comm.h"
#include "tessel/core/params.h"
#include "tessel/kernels/kernels.h"

namespace tessel {

class DataParallel {
 public:
  // `include` selects the parameters this instance reduces (all when empty): dense parameters
  // over DP × CP and experts over expert-DP are two instances over one registry.
  DataParallel(const Kernels& kernels, ParamRegistry& params, Comm& dp, bool distributed_optimizer,
               int64_t bucket_floats = int64_t{1} << 22,
               const std::function<bool(const Param&)>& include = {}, bool overlap = false);

  // The flat ranges this rank's optimizer updates: its parameters, or its slice of every bucket.
  std::vector<FlatRange> owned_ranges() const;

  // Before the last microbatch's backward: from now on finished gradients start reductions
  // (with overlap; otherwise both do nothing).
  void arm();
  // Called by the model's backward when parameter `index`'s gradient is final for this step.
  void grad_ready(int index);
  // Reduces what has not started, waits for every reduction; gradients are then reduced.
  void finish_grad_reduction();
  // Distributed optimizer only: every rank gets every bucket's updated parameters.
  void gather_params();

 private:
  struct Bucket {
    int64_t begin = 0, end = 0;  // flat range
    int64_t shard = 0;           // ceil(size / DP): each rank's slice with padding
    int pending = 0;             // parameters whose gradient is not final yet
    bool started = false;
    Request request;
  };
  // Reduces bucket b: non-blocking (the request waited in finish_grad_reduction) or blocking.
  void start(Bucket& b, bool blocking);
  // Distributed optimizer: the part of bucket b this DP rank updates (empty past the end).
  FlatRange own_slice(const Bucket& b) const;

  const Kernels& k_;
  ParamRegistry& params_;
  Comm& dp_;
  bool distributed_, overlap_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;       // parameter index -> bucket
  bool armed_ = false;
  // Distributed optimizer, per bucket: a padded copy (DP · shard) for the reduce-scatter and
  // all-gather, and this rank's slice (shard).
  std::vector<Tensor> staging_, slices_;
};

}  // namespace tessel
