#include "tessel/train/planned_run.h"

#include "tessel/core/error.h"
#include "tessel/train/plan.h"

namespace tessel {

std::vector<std::string> planned_run_violations(const ModelConfig& sizes, const PlanRun& run) {
  TrainOptions o;
  o.batch.micro_batch_size = run.micro_batch;
  o.batch.global_batch_size = run.global_batch;
  o.data.path = {"(planned)"};  // read by the trainer, never by plan_training
  o.parallel.layout = run.parallel;
  o.parallel.pipeline = {.schedule = run.schedule, .microbatch_group = run.microbatch_group,
                         .first_stage_layers = run.first_stage_layers,
                         .last_stage_layers = run.last_stage_layers, .layout = run.pipeline_layout};
  o.parallel.ddp.overlap_grad_reduce = run.overlap_grad_reduce;
  std::vector<std::string> v;
  try {
    plan_training(sizes, o);
  } catch (const ConfigError& e) {
    // One ConfigError lists every broken rule: "invalid configuration: A; B; C".
    std::string text = e.what();
    const std::string prefix = "invalid configuration: ";
    if (text.rfind(prefix, 0) == 0) text = text.substr(prefix.size());
    for (size_t at = 0;;) {
      const size_t next = text.find("; ", at);
      v.push_back(text.substr(at, next == std::string::npos ? std::string::npos : next - at));
      if (next == std::string::npos) break;
      at = next + 2;
    }
  }
  return v;
}

}  // namespace tessel
