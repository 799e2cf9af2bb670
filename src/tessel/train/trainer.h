// The training loop: one iteration = zero gradients, forward + backward over every microbatch of
// this rank's share of the global batch, gradient norm and clipping, AdamW step, logging.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessel/data/dataset.h"
#include "tessel/model/config.h"
#include "tessel/optim/adamw.h"
#include "tessel/optim/lr_schedule.h"
#include "tessel/train/log.h"

namespace tessel {

struct TrainOptions {
  int64_t micro_batch_size = 16;
  int64_t global_batch_size = 32;
  uint64_t seed = 1234;
  int64_t log_interval = 10;
  std::string data_path;
  Sampling sampling = Sampling::Shuffled;
  std::string log_json;   // one JSON object per logged iteration
  std::string init_from;  // Hugging Face safetensors file to start from
  std::string save_hf;    // folder for model.safetensors + config.json at the end
  OptimizerConfig optimizer;
  LrScheduleConfig lr;  // train_iters is taken from here
  bool progress = false;  // live progress line (when stdout is a terminal)
  bool profile = false;   // report GEMM throughput and memory at the end
};


// Trains and returns every iteration's statistics.
std::vector<IterationStats> train(const ModelConfig& model, const TrainOptions& options);

}  // namespace tessel
