// Fully sharded data parallelism: Megatron-FSDP's optim_grads (ZeRO-2) and optim_grads_params
// (ZeRO-3), in one place. The distributed optimizer (ZeRO-1, parallel/data_parallel.h) shards
// Adam's state over DP; here the gradients are sharded too, and with optim_grads_params the
// parameters: each DP rank keeps 1/DP of every weight unit (parallel/weight_units.h) and the unit is
// gathered whole just before the chunk computes with it, then freed.
//
// Memory. The registry's flat buffers stay one address space, so every other part of tessel (the
// optimizer over its owned ranges, the norms, checkpoints) reads them as before; what is not this
// rank's is discarded (DeviceMemory::discard: its pages go back to the system on the host) and
// takes no memory until gathered again. A unit's buckets are its runs of consecutive parameters
// reduced over one group (dense over DP × CP, routed experts over expert-DP); rank r owns the r-th
// of DP equal slices of each bucket (the last ones shorter), gathered in place
// (all_gather_v); the unit's gradients are reduce-scattered into the owned slices, which keep the
// rank's sum over the microbatches (each rank's backward adds to its own slice, the others' parts
// arrive by the reduce-scatter), and the rest is discarded.
//
// When. acquire(unit) waits for the unit's gather (started ahead as the previous unit's prefetch,
// or now) and starts the gather of the unit the pass computes with next: the next layer in the
// forward, the previous one in the backward. release(unit) frees it unless another user holds it
// or the policy keeps it:
//   reshard after forward (torchtitan's name; FSDP2's default): freed after every forward and
//     every backward, so a microbatch gathers each unit twice; gradients are reduce-scattered after
//     every microbatch's backward and accumulated as shards (1/DP of the gradients held);
//   no reshard after forward (--torch-fsdp2-no-reshard-after-forward; the default under pipeline
//     parallelism, as torchtitan's, where a unit would otherwise be gathered again for every
//     microbatch's forward and backward): a unit stays whole from its first forward to the last
//     microbatch's backward, and its gradients accumulate whole over the microbatches and are
//     reduce-scattered once, after the last — one gather and one reduce-scatter per step, at the
//     memory of the stage's whole weights and gradients during the step.
// With optim_grads the parameters stay whole on every rank (gathered after the optimizer's step as
// ZeRO-1 does) and only the gradients' side above applies.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tessel/comm/comm.h"
#include "tessel/core/params.h"
#include "tessel/kernels/kernels.h"
#include "tessel/parallel/weight_units.h"

namespace tessel {

struct FullyShardedConfig {
  bool shard_params = true;           // optim_grads_params; false: optim_grads
  bool reshard_after_forward = true;  // resolved (ParallelConfig::reshards_after_forward)
  std::function<bool(const Param&)> is_expert;  // reduced over expert-DP, the rest over DP × CP
  // Parameters each in a bucket of its own: a tied embedding and its copy on the last stage,
  // whose slices must match to be summed over the embedding group.
  std::vector<int> alone;
};

class FullySharded final : public WeightUnitHooks {
 public:
  // `units`: every parameter of `params` in exactly one unit; each chunk's units in forward
  // order, `chunk_first` the first unit of each chunk (prefetch stays within a chunk).
  FullySharded(const Kernels& k, ParamRegistry& params, Comm& dense, Comm& experts,
               std::vector<WeightUnit> units, std::vector<int> chunk_first, FullyShardedConfig config);

  // The flat ranges this rank owns (its slice of every bucket), ascending.
  const std::vector<FlatRange>& owned_ranges() const { return owned_; }

  // Before each forward or backward the pipeline runs: whether it is the step's last microbatch
  // (without resharding after forward, units are freed and gradients reduced only then).
  void begin_compute(bool last_microbatch) { last_microbatch_ = last_microbatch; }
  void acquire(int unit, bool backward) override;
  void release(int unit, bool backward) override;
  void grads_written(int unit) override;

  // Discards every gradient (the step's start).
  void zero_grads();
  // After the pipeline has run: reduce-scatters what is still pending, so the owned ranges of the
  // flat gradients hold the reduced slices; frees every unit. Collective.
  void finish_grad_reduction();
  // After the optimizer's step: with whole parameters (optim_grads) every rank gets every
  // updated slice; with sharded ones nothing (each unit is gathered when next used). Collective.
  void gather_params();
  // Every unit whole (before a save or an export reads every value); collective. Then
  // shard_values() frees them again, as after the values are set (initialised, loaded).
  void gather_all();
  void shard_values();

  // This rank's memory for the model's state, in bytes: the parameters it keeps (owned slices,
  // or all of them with optim_grads), its gradient slices, and at most how many bytes of
  // gathered units were whole at once since the last call.
  struct Held {
    int64_t params = 0, grads = 0, gathered_peak = 0;
  };
  Held take_held();

 private:
  struct Bucket {
    int64_t begin = 0, end = 0;  // flat range
    Comm* group = nullptr;
    std::vector<int64_t> counts, offsets;  // each rank's slice, in elements and from begin
    int64_t own_begin = 0, own_end = 0;    // this rank's slice, flat
  };
  struct Unit {
    std::vector<int> buckets;
    std::vector<int> reads;  // other units acquired with it
    int next_forward = -1, next_backward = -1;  // prefetched when this one is acquired
    bool backward_needs_weights = true;
    int users = 0;
    bool whole = false;
    std::vector<Request> arriving;  // its gather in flight
    bool dirty = false;             // gradients written since its last reduce-scatter
    int64_t bytes = 0;              // all its buckets
  };
  void start_gather(Unit& u);
  void wait_gather(Unit& u);
  void free_unit(Unit& u);
  void reduce_scatter(Unit& u);
  void take(int unit);  // a user more for the unit, gathered now
  void give_back(int unit, bool backward);

  const Kernels& k_;
  ParamRegistry& params_;
  FullyShardedConfig config_;
  std::vector<Bucket> buckets_;
  std::vector<Unit> units_;
  std::vector<FlatRange> owned_;
  Tensor reduced_;  // one slice reduce-scattered, before it goes to its place
  bool last_microbatch_ = true;
  int64_t gathered_now_ = 0, gathered_peak_ = 0;
};

}  // namespace tessel
