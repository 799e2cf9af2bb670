// What `tessel train` is asked to do, grouped as a Megatron-LM or torchtitan user thinks of a run:
// the data, the batch, the optimizer and its learning-rate schedule, the parallel layout and
// its schedule, checkpoints, logging. Every field is named after its flag. train/plan.h checks
// the rules and resolves what follows from them (DP, stages, schedule, microbatches) once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tessel/data/tokenizer.h"
#include "tessel/model/recompute.h"
#include "tessel/kernels/types.h"
#include "tessel/optim/adamw.h"
#include "tessel/optim/loss_scaler.h"
#include "tessel/optim/lr_schedule.h"
#include "tessel/parallel/layout.h"

namespace tessel {

// Megatron's data flags (data/dataset_builder.h reads them): a blend for the three splits under
// --split, or one blend per split; each path a preprocessed PREFIX (.bin/.idx) or a text file.
struct DataOptions {
  std::vector<std::string> path;                                   // --data-path [W1] P1 [W2 P2 ...]
  std::vector<std::string> train_path, valid_path, test_path;      // --{train,valid,test}-data-path
  bool mock_data = false;  // --mock-data: Megatron's MockGPTDataset (data/mock_dataset.h) instead
  std::string split = "969, 30, 1";                                // --split
  std::string cache_path;                                          // --data-cache-path
  TokenizerOptions tokenizer;                                      // --tokenizer-type, ... 
  bool reset_position_ids = false;    // --reset-position-ids: positions restart in each document
  bool reset_attention_mask = false;  // --reset-attention-mask: attention stays in each document
  bool eod_mask_loss = false;         // --eod-mask-loss: no loss where the input ends a document
};

// Megatron's evaluation: every --eval-interval iterations and at the end, --eval-iters global
// batches of the valid split (forward only); the test split's at the end. 0 iterations: none.
struct EvalOptions {
  int64_t interval = 1000;  // --eval-interval
  int64_t iters = 100;      // --eval-iters
};

// Global batch = micro batch × DP × microbatches (gradient accumulation over the microbatches).
struct BatchOptions {
  int64_t micro_batch_size = 16;  // --micro-batch-size (required by Megatron-LM; README says why not here)
  // --global-batch-size; 0, not given: micro batch × DP, Megatron's default (train/plan.h resolves it)
  int64_t global_batch_size = 0;
  // --step-batch-size-schedule "THRESHOLD:BATCH ...": each iteration's global batch by the tokens
  // consumed before it (train/batch_schedule.h), instead of --global-batch-size, which then takes
  // its default: the evaluation's batch and the unit of the _iters learning-rate flags.
  std::string step_schedule;
  // --decrease-batch-size-if-needed: Megatron rounds a global batch not divisible by micro batch
  // × DP down, but its evaluation batch must divide (with no --eval-global-batch-size here, the
  // global batch): tessel refuses the batch, as Megatron ends up doing. Not with a schedule.
  bool decrease_if_needed = false;
  // --calculate-per-token-loss: the gradient is that of Σ token losses / the loss tokens of the
  // whole global batch; without it (Megatron's default), of the mean over the global batch's
  // microbatches of each one's mean token loss (train/loss_scales.h). The same with no masked
  // token; the logged loss is the per-token one either way, as Megatron's.
  bool calculate_per_token_loss = false;
};

// AdamW and Megatron's learning-rate schedule; lr.train_iters (--train-iters) is the run's length.
// The defaults are `tessel train`'s: the default model's run on the bundled corpus.
struct OptimOptions {
  OptimizerConfig adamw;  // --weight-decay, --adam-beta1/2, --adam-eps, --clip-grad
  // --enable-optimizer-post-validation: step before the gradient norm is known, undo and redo
  // when clipping or a non-finite norm would have changed the step (optim/post_validation.h)
  bool post_validation = false;
  // --lr, --min-lr, --lr-warmup-init, --lr-warmup-iters/-samples/-fraction, --lr-decay-iters/-samples,
  // --train-iters/-samples, --lr-decay-style
  // --train-iters or --train-samples has no default, as in Megatron-LM; the rest are Megatron's
  // but --lr, which Megatron-LM leaves unset (a run without it fails there).
  LrScheduleConfig lr = {.lr = 1e-3f};
  // --decoupled-lr, --decoupled-min-lr: the peak and final rates of the input embedding and the
  // output layer (Megatron's param group of both), on the same schedule (its warmup from
  // --lr-warmup-init included). The minimum defaults to --min-lr; nothing without --decoupled-lr.
  std::optional<float> decoupled_lr, decoupled_min_lr;
};

// How the layers are cut into pipeline stages and which schedule runs them.
struct PipelineOptions {
  std::string schedule;         // --schedule gpipe | 1f1b | interleaved | zb-h1 | zb-v | dualpipev; empty: 1f1b, interleaved with VPP
  int microbatch_group = 0;     // --microbatch-group-size-per-virtual-pipeline-stage (0: PP)
  int first_stage_layers = -1;  // --decoder-first-pipeline-num-layers (-1: not given)
  int last_stage_layers = -1;   // --decoder-last-pipeline-num-layers
  std::string layout;           // --pipeline-model-parallel-layout
  int layers_per_virtual_stage = 0;  // --num-layers-per-virtual-pipeline-stage (0: not given): VPP
                                     // = layers / PP / this, as Megatron derives it
};

// Megatron's DistributedDataParallel settings: the gradient buckets and their overlap.
struct DdpOptions {
  int64_t bucket_size = int64_t{1} << 22;  // --ddp-bucket-size: floats per reduction bucket
  bool overlap_grad_reduce = false;        // --overlap-grad-reduce: reduce buckets during backward
};

struct ParallelOptions {
  ParallelConfig layout;               // sizes, order, --sequence-parallel, --use-distributed-optimizer
  PipelineOptions pipeline;
  std::string cp_comm_type = "p2p";    // --cp-comm-type p2p | all-gather
  // --moe-token-dispatcher-type alltoall | allgather | flex (flex: all-to-all, DeepEP and
  // HybridEP are not here)
  std::string moe_token_dispatcher_type = "alltoall";
  DdpOptions ddp;
};

// Weights in and out: Megatron's checkpoint folders and Hugging Face files.
struct CheckpointOptions {
  std::string save;            // --save: checkpoint folder (ckpt/checkpoint.h)
  int64_t save_interval = 0;   // --save-interval: every N iterations (and at the end)
  std::string load;            // --load: resume from this folder's newest save
  // Megatron's checkpoint-loading switches. --finetune: --load's weights alone, from iteration 0
  // (the first samples, a fresh optimizer and schedule). --no-load-optim: the weights and the
  // iteration, a fresh optimizer (Adam's moments and step count: the schedule starts again).
  // --no-save-optim: saves without the moments. --no-load-rng, --no-save-rng: no effect, as
  // tessel keeps no generator state (every draw is a function of --seed and its coordinates).
  bool finetune = false, no_load_optim = false, no_save_optim = false;
  bool no_load_rng = false, no_save_rng = false;
  // A resumed save's learning-rate schedule differs from the flags' (train/resume.h): use the
  // flags' (--override-opt_param-scheduler) or the save's (--use-checkpoint-opt_param-scheduler);
  // neither: refused, as Megatron's OptimizerParamScheduler.
  bool override_opt_param_scheduler = false, use_checkpoint_opt_param_scheduler = false;
  bool async_save = false;     // --async-save: write on a background thread
  int64_t exit_interval = 0;   // --exit-interval: stop (after a save) at a multiple of this
  std::string init_from;       // --init-from: Hugging Face safetensors file or folder to start from
  std::string save_hf;         // --save-hf: folder for model.safetensors + config.json at the end
  std::string save_hf_model_type;  // --save-hf-model-type: a GDN model's family (train/export.h)
  // Megatron-LM's checkpoint format flags, accepted and answered at the start: tessel saves and
  // loads its own format only ("" / false: not given).
  std::string ckpt_format;             // --ckpt-format torch | torch_dist | torch_dcp | fsdp_dtensor
  bool auto_detect_ckpt_format = false;  // --auto-detect-ckpt-format
  std::string dist_ckpt_strictness;    // --dist-ckpt-strictness
};

// Megatron's TensorBoard flags: which scalars go to --tensorboard-dir's event files, and when
// (train/metrics.h names the tags). The figures behind them also go to --log-json.
struct TensorBoardOptions {
  std::string dir;                 // --tensorboard-dir: event files, written by the last rank
  int64_t interval = 1;            // --tensorboard-log-interval: the per-iteration scalars' cadence
  int64_t queue_size = 1000;       // --tensorboard-queue-size: events kept before a write to disk
  bool timers = false;             // --log-timers-to-tensorboard: iteration-time (and throughput)
  bool loss_scale = true;          // --no-log-loss-scale-to-tensorboard turns loss-scale off
  bool world_size = false;         // --log-world-size-to-tensorboard
  bool memory = false;             // --log-memory-to-tensorboard: resident memory, the largest rank's
  bool validation_ppl = false;     // --log-validation-ppl-to-tensorboard
  bool params_norm = false;        // --log-params-norm: the L2 norm of every parameter, once
  bool num_zeros_in_grad = false;  // --log-num-zeros-in-grad: zeros among the reduced gradients
  bool throughput = false;         // --log-throughput: model TFLOP/s per rank
};

// Megatron's profiler window (--profile): the compute actions of iterations step_start + 1 to
// step_end (1-based; Megatron starts its profiler after step_start iterations and stops it after
// step_end) on `ranks` (every rank when empty), written as one Chrome trace.
struct ProfileWindow {
  bool on = false;                  // --profile
  int64_t step_start = 10;          // --profile-step-start
  int64_t step_end = 12;            // --profile-step-end
  std::vector<int> ranks;           // --profile-ranks
  std::string path = "profile_trace.json";  // --pipeline-timeline's file when given
};

struct LogOptions {
  int64_t interval = 100;  // --log-interval
  std::string json;        // --log-json: one JSON object per logged iteration
  bool progress = false;   // the live progress line (when stdout is a terminal, or --progress)
  bool profile_report = false;  // --profile-report: GEMM throughput, memory and communication at the end
  ProfileWindow profile;        // --profile, --profile-step-start/-end, --profile-ranks
  TensorBoardOptions tensorboard;
  std::string pipeline_timeline;  // --pipeline-timeline: the last iteration's actions, a Chrome trace
  bool straggler = false;  // --log-straggler: each rank's step time against the median
  int64_t straggler_minmax_count = 1;  // --straggler-minmax-count: slowest and fastest ranks named
};

// What a run checks, and how it ends when something goes wrong: non-finite values
// (train/numerics.h), a signal or the time limit (train/signals.h), a rank that stops (the
// distributed timeout, comm/mpi.h). Megatron's flags.
struct FaultOptions {
  // --check-for-nan-in-loss-and-grad: a non-finite loss or gradient norm stops the run; off
  // (--no-check-for-nan-in-loss-and-grad) the iteration's optimizer step is skipped instead.
  bool check_nan = true;
  std::string rerun_mode = "validate_results";  // --rerun-mode disabled | validate_results
  bool check_spiky_loss = false;                // --check-for-spiky-loss
  std::string inject;                           // --inject-fault KIND:ITERATION[:RANK] (tests)
  bool exit_signal_handler = false;   // --exit-signal-handler: SIGTERM, SIGINT, SIGUSR1, SIGUSR2
  double exit_duration_mins = 0;      // --exit-duration-in-mins (0: no limit)
  double distributed_timeout_minutes = 10;  // --distributed-timeout-minutes
  double distributed_timeout_seconds = 0;   // --distributed-timeout-seconds (0: the minutes)

  double distributed_timeout() const {
    return distributed_timeout_seconds > 0 ? distributed_timeout_seconds
                                           : 60 * distributed_timeout_minutes;
  }
};

// Megatron-LM's FP8 flags (megatron/core/transformer/transformer_config.py; --fp8-param-gather:
// megatron/training/arguments.py), each with Megatron's default. The recipes' arithmetic is
// kernels/fp8_scaling.h's; train/mixed_precision.h checks the rules.
struct Fp8Options {
  std::string format;                             // --fp8-format e4m3 | hybrid; empty: no FP8
  std::string recipe = "delayed";                 // --fp8-recipe tensorwise | delayed | mxfp8 | blockwise | custom
  int margin = 0;                                 // --fp8-margin: delayed's scale divided by 2^margin
  int amax_history_len = 1;                       // --fp8-amax-history-len
  std::string amax_compute_algo = "most_recent";  // --fp8-amax-compute-algo most_recent | max
  bool first_last_layers_bf16 = false;            // --first-last-layers-bf16
  int num_layers_at_start_in_bf16 = 1;            // --num-layers-at-start-in-bf16
  int num_layers_at_end_in_bf16 = 1;              // --num-layers-at-end-in-bf16
  bool param_gather = false;                      // --fp8-param-gather
  bool on() const { return !format.empty(); }
};

struct TrainOptions {
  uint64_t seed = 1234;  // --seed: initialisation, the datasets' shuffles and the dropout masks
  // --bf16, --fp16: every GEMM on bf16 or fp16 operands with fp32 accumulation (kernels/bf16.h,
  // kernels/fp16.h); master weights, gradients and their reductions, the optimizer, norms,
  // softmax and loss stay fp32.
  Precision precision = Precision::FP32;
  // --loss-scale, --initial-loss-scale, --min-loss-scale, --loss-scale-window, --hysteresis
  // (optim/loss_scaler.h).
  LossScaleOptions loss_scale;
  Fp8Options fp8;  // --fp8-format, --fp8-recipe, ...
  Device device = Device::CPU;  // --device cpu | cuda: where the kernel table computes
  // --model-config: the model's file, read by the command (apps/model_flags.h); here so that no
  // output of the run is written over it (train/output_paths.h).
  std::string model_config;
  DataOptions data;
  EvalOptions eval;
  BatchOptions batch;
  OptimOptions optim;
  RecomputeOptions recompute;  // --recompute-granularity, -method, -num-layers, -modules
  ParallelOptions parallel;
  CheckpointOptions checkpoint;
  LogOptions log;
  FaultOptions faults;
  // What the command line's flags come to, said at the start (--explain-flags, the implementation
  // switches that have no effect here); the plan adds its own (TrainPlan::notes).
  std::vector<std::string> notes;
};

}  // namespace tessel
