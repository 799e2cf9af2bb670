// What `tessel train` is asked to do: every option of a training run, named after its flag.
#pragma once

#include <cstdint>
#include <string>

#include "tessel/data/dataset.h"
#include "tessel/optim/adamw.h"
#include "tessel/optim/lr_schedule.h"
#include "tessel/parallel/layout.h"

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

}  // namespace tessel
