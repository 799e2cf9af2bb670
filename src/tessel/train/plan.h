// The rules a training configuration must keep — model, batch, parallel layout, pipeline
// schedule, experts — stated once, and what they resolve to.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessel/model/config.h"
#include "tessel/parallel/layout.h"
#include "tessel/pipeline/schedule.h"
#include "tessel/pipeline/stages.h"
#include "tessel/train/options.h"

namespace tessel {

// Megatron's rules that involve the model and the batch: heads, query groups, ffn and vocabulary
// by TP, global batch by micro batch × DP, sequence parallel needs TP > 1 and rows divisible, ...
std::vector<std::string> training_violations(const ParallelConfig& config, const ModelConfig& model,
                                             int64_t micro_batch, int64_t global_batch);

// The stage options and the schedule of a run, as its flags ask.
StageOptions stage_options(const TrainOptions& options);
ScheduleConfig schedule_config(const TrainOptions& options, int microbatches);

// Every rule the configuration breaks — model, batch, parallel layout — in one tessel::ConfigError.
void validate_training(const ModelConfig& model, const TrainOptions& options);

}  // namespace tessel
