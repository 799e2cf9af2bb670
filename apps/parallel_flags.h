// The parallel flags, each defined once with Megatron's names, for the subcommands that take
// them: the layout (`tessel train`, `plan`, `layout`), where the layers go (the same), the
// pipeline schedule (`train`, `plan`, `schedule`), the batch (`train`, `plan`, `layout`) and
// recomputation (`train`, `plan`). Each binds to the options struct its subcommand fills, which
// must outlive app.parse(); the returned options tell which flags were given.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "tessel/model/recompute.h"
#include "tessel/parallel/layout.h"
#include "tessel/train/options.h"

namespace tessel {

// --pp and --vpp: a pipeline's size, all that `tessel schedule` needs of the layout.
struct PipelineSizeFlags {
  CLI::Option* pp;
  CLI::Option* vpp;
};
PipelineSizeFlags add_pipeline_size_flags(CLI::App& app, int& pp, int& vpp);

// --tp --pp --cp --ep --etp --vpp (and their long names), --order, --sequence-parallel and
// --use-distributed-optimizer.
struct LayoutFlags {
  CLI::Option *tp, *pp, *cp, *ep, *etp, *vpp;
  CLI::Option *sequence_parallel, *distributed_optimizer;
};
LayoutFlags add_layout_flags(CLI::App& app, ParallelConfig& config);

// Fully sharded data parallelism (parallel/fully_sharded.h): --use-megatron-fsdp with
// --data-parallel-sharding-strategy (Megatron's default optim_grads_params), --use-torch-fsdp2
// (always the parameters too) with --torch-fsdp2-no-reshard-after-forward, and torchtitan's
// policy as --fsdp-reshard-after-forward.
struct ShardingFlags {
  CLI::Option *megatron_fsdp, *torch_fsdp2, *strategy, *reshard, *no_reshard;
  bool use_megatron_fsdp = false, use_torch_fsdp2 = false, no_reshard_after_forward = false;
  std::string strategy_name = "optim_grads_params", reshard_name = "default";
};
void add_sharding_flags(CLI::App& app, ShardingFlags& flags);
// After the parse: the strategy and policy into `config`, every rule the flags break into
// `violations`, and a line saying what is sharded into `notes`.
void resolve_sharding(const ShardingFlags& flags, ParallelConfig& config, std::vector<std::string>& violations,
                      std::vector<std::string>& notes);

// Where the layers go: --decoder-first-pipeline-num-layers, --decoder-last-pipeline-num-layers,
// --pipeline-model-parallel-layout, --num-layers-per-virtual-pipeline-stage.
void add_stage_flags(CLI::App& app, PipelineOptions& pipeline);

// How the microbatches run: --schedule, --microbatch-group-size-per-virtual-pipeline-stage.
void add_schedule_flags(CLI::App& app, std::string& schedule, int& microbatch_group);

// --micro-batch-size and --global-batch-size; --num-microbatches, the count they imply.
struct BatchFlags {
  CLI::Option* micro_batch;
  CLI::Option* global_batch;
};
BatchFlags add_batch_flags(CLI::App& app, BatchOptions& batch);
CLI::Option* add_microbatches_flag(CLI::App& app, int& microbatches);

// --recompute-granularity (returned), --recompute-method, --recompute-num-layers.
CLI::Option* add_recompute_flags(CLI::App& app, RecomputeOptions& recompute);

// What overlaps the end of a step: --overlap-grad-reduce, --enable-optimizer-post-validation.
void add_overlap_flags(CLI::App& app, bool& overlap_grad_reduce, bool& post_validation);

}  // namespace tessel
