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
#include "tessel/parallel/layout.h"
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
  std::string save;       // --save: checkpoint folder (checkpoint.h)
  int64_t save_interval = 0;  // --save-interval: save every N iterations (and at the end)
  std::string load;       // --load: resume from this folder's newest save
  bool async_save = false;  // --async-save: write checkpoints on a background thread
  int64_t exit_interval = 0;  // --exit-interval: stop (after a save) once the iteration is a multiple
  OptimizerConfig optimizer;
  LrScheduleConfig lr;  // train_iters is taken from here
  bool progress = false;  // live progress line (when stdout is a terminal)
  bool profile = false;   // report GEMM throughput and memory at the end
  ParallelConfig parallel;
  int64_t ddp_bucket_size = int64_t{1} << 22;  // floats per gradient-reduction bucket
  bool overlap_grad_reduce = false;  // start each bucket's reduction during backward
  std::string schedule;                 // gpipe | 1f1b | interleaved; empty: 1f1b, interleaved with VPP
  int microbatch_group = 0;             // --microbatch-group-size-per-virtual-pipeline-stage
  int first_stage_layers = -1;          // --decoder-first-pipeline-num-layers
  int last_stage_layers = -1;           // --decoder-last-pipeline-num-layers
  std::string pipeline_layout;          // --pipeline-model-parallel-layout
  std::string cp_comm_type = "p2p";     // --cp-comm-type p2p | all-gather
};

class ProcessGroups;


// Every rule the configuration breaks — model, batch, parallel layout — in one tessel::Error.
void validate_training(const ModelConfig& model, const TrainOptions& options);

// Trains on this rank's part of the layout and returns every iteration's statistics (the same
// on every rank). `groups` holds this rank's communicators (ProcessGroups::single() alone).
std::vector<IterationStats> train(const ModelConfig& model, const TrainOptions& options,
                                  ProcessGroups& groups);

}  // namespace tessel
