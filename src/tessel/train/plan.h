// The configuration of a training run, checked and resolved once. The rules live where their
// subject does — the model's sizes (ModelConfig, MoeConfig), the layout (parallel/layout.h), the
// stages (pipeline/stages.h), the schedule (pipeline/schedule.h), the optimizer and the LR
// schedule (optim/) — plus the ones here that tie the model, the layout and the batch together.
// plan_training() is the one place that asks all of them, lists every broken rule in one
// ConfigError, and resolves what follows: DP, the stages, the schedule and the microbatches,
// which the trainer (and its export) read instead of deriving them again.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessel/data/batches.h"
#include "tessel/data/tokenizer.h"
#include "tessel/model/config.h"
#include "tessel/model/layer_context.h"
#include "tessel/parallel/context_parallel.h"
#include "tessel/parallel/layout.h"
#include "tessel/pipeline/schedule.h"
#include "tessel/pipeline/stages.h"
#include "tessel/train/batch_schedule.h"
#include "tessel/train/options.h"
#include "tessel/train/virtual_stages.h"

namespace tessel {

// The batch: both sizes positive and, for a valid layout, the global batch a multiple of
// micro batch × DP. `tessel layout` checks these alone when it is given no model.
std::vector<std::string> batch_violations(const ParallelConfig& config, int64_t micro_batch,
                                          int64_t global_batch);
// The tokens of one training microbatch, micro batch × --seq-length, at most (training_violations).
inline constexpr int64_t kMaxMicrobatchTokens = int64_t{1} << 23;

// Microbatches per iteration, global / (micro × DP), for a batch without violations (which
// bound it to an int).
int microbatch_count(const ParallelConfig& config, int64_t micro_batch, int64_t global_batch);

// Megatron's rules that involve the model and the batch: the batch rules and the model's split.
std::vector<std::string> training_violations(const ParallelConfig& config, const ModelConfig& model,
                                             int64_t micro_batch, int64_t global_batch);
// The model's split under the layout and the micro batch: heads, query groups, ffn and vocabulary
// by TP, sequence parallel needs TP > 1 and rows divisible, CP cuts the sequence into 2·CP
// chunks, expert layers under TP need sequence parallel, a microbatch's tokens bounded, ...
std::vector<std::string> model_split_violations(const ParallelConfig& config, const ModelConfig& model,
                                                int64_t micro_batch);

// A run, resolved. Everything here follows from the model and the options.
struct TrainPlan {
  ModelConfig model;
  TrainOptions options;  // as given, but for what notes says; options.parallel.layout is the layout (world included)
  std::shared_ptr<const Tokenizer> tokenizer;  // made from options.data.tokenizer
  std::vector<std::string> notes;              // what was changed from the flags, said at the start
  int dp = 1;            // world / (TP × CP × PP)
  // Per DP rank in a batch of --global-batch-size: every iteration's without a step schedule, and
  // the evaluation's.
  int microbatches = 1;
  StageOptions stages;
  std::vector<ChunkSpec> chunks;  // every model chunk, k = 0 .. PP·VPP − 1 (model chunk k on stage k mod PP)
  ScheduleConfig schedule;        // for `microbatches`
  CpCommType cp_comm = CpCommType::P2P;
  // Every iteration's global batch: --global-batch-size, or --step-batch-size-schedule's.
  BatchSchedule batches = BatchSchedule::constant(1);
  // A resumed run's validation goes on where its save's stopped: the evaluations before the save
  // (counted under these flags) and the validation samples they consumed (Megatron's
  // consumed_valid_samples); 0, 0 for a new run.
  int64_t resumed_evaluations = 0, resumed_valid_samples = 0;
  // --load holds a save (its tracker is there): the run starts from its weights, and --init-from's
  // are not read (train/resume.h).
  bool loads_save = false;
  MoeDispatcherType moe_dispatcher = MoeDispatcherType::AllToAll;  // --moe-token-dispatcher-type

  const ParallelConfig& layout() const { return options.parallel.layout; }
  // --train-iters, or the iterations of --train-samples: samples / G, or with a step schedule
  // until they are consumed (Megatron's update_train_iters).
  int64_t train_iters() const;
  // Iteration `it`'s global batch: its first sample (the samples consumed before it, which
  // Megatron's sampler starts from) and its microbatches per DP rank.
  BatchSpan batch_span(int64_t it) const;
  // The validation samples consumed before evaluation number `evaluation` (0: the first, after
  // iteration --eval-interval): --eval-iters × G each, from where a resumed run's save left off.
  int64_t valid_samples_before(int64_t evaluation) const;
  // The pipeline schedule of an iteration of `microbatches`.
  ScheduleConfig schedule_of(int microbatches) const;
  // The model chunks pipeline rank `stage` holds, in its chunk order.
  std::vector<ChunkSpec> stage_chunks(int stage) const;
  // DP rank r's share of every global batch, dealt out as Megatron's sampler does.
  BatchShape batch_shape(int dp_rank) const;
  // The packed documents the data flags ask for.
  Packing packing() const;
  // Tokens of a global batch of `global_batch` samples, G × S: the loss is the mean over all of them.
  double batch_tokens(int64_t global_batch) const;
};

// Checks every rule of the model, the options (data, tokenizer, evaluation), the layout, the
// batch, the stages, the schedule and the experts; throws one tessel::ConfigError listing every
// one broken, else resolves. Reads the tokenizer's files (what keeps it from being made, its flags
// or a bad file, is listed with the rest); a vocab_size of 0 becomes the tokenizer's. With --load, resolved against its newest save
// (train/resume.h): the batches go on from its consumed samples, its schedule checked.
TrainPlan plan_training(ModelConfig model, const TrainOptions& options);
// The same rules without the throw: every one broken, one message each (empty when the
// configuration is valid). `tessel plan` asks it of the layouts it considers.
std::vector<std::string> training_plan_violations(ModelConfig model, const TrainOptions& options);

}  // namespace tessel
