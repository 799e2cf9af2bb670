#include "tessel/train/planned_run.h"

#include "tessel/train/plan.h"

namespace tessel {

std::vector<std::string> planned_run_violations(const ModelConfig& sizes, const PlanRun& run) {
  TrainOptions o;
  o.batch.micro_batch_size = run.micro_batch;
  o.batch.global_batch_size = run.global_batch;
  o.data.path = {"(planned)"};  // read by the trainer, never by plan_training
  o.parallel.layout = run.parallel;
  // As a run's flags give it: a layout string's entries are its virtual stages (Megatron takes
  // no --num-virtual-stages-per-pipeline-rank beside it).
  if (!run.pipeline_layout.empty()) o.parallel.layout.vpp = 1;
  o.parallel.pipeline = {.schedule = run.schedule, .microbatch_group = run.microbatch_group,
                         .first_stage_layers = run.first_stage_layers,
                         .last_stage_layers = run.last_stage_layers, .layout = run.pipeline_layout};
  o.parallel.ddp.overlap_grad_reduce = run.overlap_grad_reduce;
  o.recompute = run.recompute;
  return training_plan_violations(sizes, o);
}

}  // namespace tessel
