#include "parallel_flags.h"

#include <fmt/format.h>

namespace tessel {

PipelineSizeFlags add_pipeline_size_flags(CLI::App& app, int& pp, int& vpp) {
  return {app.add_option("--pp,--pipeline-model-parallel-size", pp, "pipeline parallel size")
              ->capture_default_str(),
          app.add_option("--vpp,--num-virtual-stages-per-pipeline-rank", vpp,
                         "virtual pipeline stages: model chunks per pipeline rank")
              ->capture_default_str()};
}

LayoutFlags add_layout_flags(CLI::App& app, ParallelConfig& c) {
  LayoutFlags f;
  f.tp = app.add_option("--tp,--tensor-model-parallel-size", c.tp, "tensor parallel size")
             ->capture_default_str();
  const PipelineSizeFlags pipeline = add_pipeline_size_flags(app, c.pp, c.vpp);
  f.pp = pipeline.pp, f.vpp = pipeline.vpp;
  f.cp = app.add_option("--cp,--context-parallel-size", c.cp, "context parallel size")->capture_default_str();
  f.ep = app.add_option("--ep,--expert-model-parallel-size", c.ep, "expert parallel size")
             ->capture_default_str();
  f.etp =
      app.add_option("--etp,--expert-tensor-parallel-size", c.etp, "expert tensor parallel size (0: = TP)")
          ->capture_default_str();
  app.add_option("--order", c.order, "rank order, first axis fastest")->capture_default_str();
  f.sequence_parallel = app.add_flag("--sequence-parallel", c.sequence_parallel,
                                     "split norms and residuals along the sequence over TP");
  f.distributed_optimizer = app.add_flag("--use-distributed-optimizer", c.distributed_optimizer,
                                         "shard Adam state and the update over DP (ZeRO-1)");
  return f;
}

void add_sharding_flags(CLI::App& app, ShardingFlags& f) {
  f.megatron_fsdp = app.add_flag("--use-megatron-fsdp", f.use_megatron_fsdp,
                                 "fully sharded data parallelism (Megatron-FSDP), sharding as "
                                 "--data-parallel-sharding-strategy says");
  f.torch_fsdp2 = app.add_flag("--use-torch-fsdp2", f.use_torch_fsdp2,
                               "fully sharded data parallelism as PyTorch's FSDP2: optimizer state, gradients and "
                               "parameters (tessel's one mechanism, as --use-megatron-fsdp's optim_grads_params)");
  f.strategy = app.add_option("--data-parallel-sharding-strategy", f.strategy_name,
                              "with --use-megatron-fsdp: no_shard | optim (ZeRO-1) | optim_grads (ZeRO-2) | "
                              "optim_grads_params (ZeRO-3)")
                   ->capture_default_str()
                   ->check(CLI::IsMember({"no_shard", "optim", "optim_grads", "optim_grads_params"}));
  f.reshard = app.add_option("--fsdp-reshard-after-forward", f.reshard_name,
                             "fully sharded: free each unit after its forward: default (always, but never under "
                             "pipeline parallelism, as torchtitan) | always | never")
                  ->capture_default_str()
                  ->check(CLI::IsMember({"default", "always", "never"}));
  f.no_reshard = app.add_flag("--torch-fsdp2-no-reshard-after-forward", f.no_reshard_after_forward,
                              "keep units whole from the forward to the backward (--fsdp-reshard-after-forward never)");
}

void resolve_sharding(const ShardingFlags& f, ParallelConfig& c, std::vector<std::string>& v,
                      std::vector<std::string>& notes) {
  const bool fsdp = f.use_megatron_fsdp || f.use_torch_fsdp2;
  if (f.use_megatron_fsdp && f.use_torch_fsdp2)
    v.push_back("--use-megatron-fsdp and --use-torch-fsdp2: give one (both are tessel's one fully sharded mechanism)");
  if (f.strategy->count() > 0 && !f.use_megatron_fsdp)
    v.push_back("--data-parallel-sharding-strategy takes effect with --use-megatron-fsdp (as in Megatron-LM); "
                "--use-torch-fsdp2 always shards the parameters");
  if ((f.reshard->count() > 0 || f.no_reshard->count() > 0) && !fsdp)
    v.push_back(fmt::format("{} needs --use-megatron-fsdp or --use-torch-fsdp2",
                            f.reshard->count() > 0 ? "--fsdp-reshard-after-forward" : "--torch-fsdp2-no-reshard-after-forward"));
  if (f.no_reshard->count() > 0 && f.reshard->count() > 0 && f.reshard_name != "never")
    v.push_back(fmt::format("--torch-fsdp2-no-reshard-after-forward and --fsdp-reshard-after-forward {}: they disagree",
                            f.reshard_name));
  if (!fsdp) return;
  if (f.use_torch_fsdp2) c.sharding = ShardingStrategy::OptimGradsParams;
  else parse_sharding_strategy(f.strategy_name, c.sharding);
  // As Megatron-FSDP (v1) turns on its distributed optimizer: the state is sharded unless no_shard.
  c.distributed_optimizer = c.sharding != ShardingStrategy::NoShard;
  parse_reshard_after_forward(f.no_reshard_after_forward ? "never" : f.reshard_name, c.reshard_after_forward);
  static const char* const kWhat[] = {"nothing but the batch (DDP)", "the optimizer state (ZeRO-1)",
                                      "the optimizer state and gradients (ZeRO-2)",
                                      "the optimizer state, gradients and parameters (ZeRO-3)"};
  std::string note = fmt::format("{} {}: data parallelism shards {}", f.use_megatron_fsdp ? "--use-megatron-fsdp" : "--use-torch-fsdp2",
                                 sharding_strategy_name(c.sharding), kWhat[static_cast<int>(c.sharding)]);
  if (c.fully_sharded())
    note += fmt::format(", a unit (the embedding, each layer, the head, the MTP layers) at a time; {}",
                        c.reshards_after_forward()
                            ? "units are freed after each forward and gradients reduce-scattered every microbatch"
                            : "units stay whole over the step's microbatches and gradients are reduce-scattered once");
  notes.push_back(std::move(note));
}

void add_stage_flags(CLI::App& app, PipelineOptions& p) {
  app.add_option("--decoder-first-pipeline-num-layers", p.first_stage_layers,
                 "layers of the first pipeline stage");
  app.add_option("--decoder-last-pipeline-num-layers", p.last_stage_layers,
                 "layers of the last pipeline stage");
  app.add_option("--pipeline-model-parallel-layout", p.layout,
                 "Megatron's layout string, e.g. \"Et*3|(tt|)*2tL\"");
  app.add_option("--num-layers-per-virtual-pipeline-stage", p.layers_per_virtual_stage,
                 "layers of each model chunk, instead of --num-virtual-stages-per-pipeline-rank (VPP = layers / "
                 "PP / this)");
}

void add_schedule_flags(CLI::App& app, std::string& schedule, int& microbatch_group) {
  app.add_option("--schedule", schedule,
                 "pipeline schedule: gpipe | 1f1b | interleaved | zb-h1 | zb-v | dualpipev (default 1f1b, "
                 "interleaved with --vpp)");
  app.add_option("--microbatch-group-size-per-virtual-pipeline-stage", microbatch_group,
                 "interleaved schedule: microbatches a model chunk runs in a row (0: PP)")
      ->capture_default_str();
}

BatchFlags add_batch_flags(CLI::App& app, BatchOptions& b) {
  CLI::Option* global_batch = app.add_option("--global-batch-size", b.global_batch_size, "samples per iteration");
  if (b.global_batch_size == 0)  // not given: Megatron's default, said in words rather than as 0
    global_batch->default_str("micro batch × DP");
  else
    global_batch->capture_default_str();
  return {app.add_option("--micro-batch-size", b.micro_batch_size, "samples per microbatch")
              ->capture_default_str(),
          global_batch};
}

CLI::Option* add_microbatches_flag(CLI::App& app, int& microbatches) {
  return app.add_option("--microbatches,--num-microbatches", microbatches, "microbatches per iteration");
}

CLI::Option* add_recompute_flags(CLI::App& app, RecomputeOptions& r) {
  CLI::Option* granularity =
      app.add_option("--recompute-granularity", r.granularity, "activation recomputation: full | selective");
  app.add_option("--recompute-method", r.method, "full recompute: uniform | block");
  app.add_option(
      "--recompute-num-layers", r.num_layers,
      "full recompute: layers per recompute group (uniform), or recomputed layers of each model chunk "
      "(block)");
  return granularity;
}

void add_overlap_flags(CLI::App& app, bool& overlap_grad_reduce, bool& post_validation) {
  app.add_flag("--overlap-grad-reduce", overlap_grad_reduce,
               "start each DP bucket's reduction during backward (non-blocking)");
  app.add_flag(
      "--enable-optimizer-post-validation", post_validation,
      "step before the global gradient norm is known; undo and redo the step if clipping or a non-finite "
      "norm changes it (zero-bubble pipelines)");
}

}  // namespace tessel
