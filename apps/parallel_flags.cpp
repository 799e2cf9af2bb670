#include "parallel_flags.h"

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
