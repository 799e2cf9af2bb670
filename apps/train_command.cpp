#include "train_command.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <omp.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>

#include "parallel_flags.h"
#include "tessel/comm/comm.h"
#include "tessel/core/error.h"
#include "tessel/data/tokenizer_files.h"
#include "tessel/family/family.h"
#include "tessel/kernels/kernels.h"
#include "tessel/parallel/groups.h"
#include "tessel/train/plan.h"
#include "tessel/train/trainer.h"
#include "thread_flags.h"
#include "tokenizer_flags.h"

#ifndef TESSEL_DEFAULT_DATA
#define TESSEL_DEFAULT_DATA "data/kjv-genesis-esther.txt"
#endif

namespace tessel {

namespace {

// What another launcher says about a job that MPI sees as this process alone: torchrun's
// WORLD_SIZE, or the tasks of an srun step (SLURM_STEP_NUM_TASKS) whose MPI did not join them.
// Each process would train alone, all of them the same run. Empty when nothing says so.
std::string launched_without_mpi() {
  const auto count = [](const char* name) {
    const char* value = std::getenv(name);
    return value == nullptr ? 0 : std::atoi(value);
  };
  if (const int n = count("WORLD_SIZE"); n > 1)
    return fmt::format("WORLD_SIZE={} says a job of {} processes (torchrun's), but MPI sees this one alone: each "
                       "would train by itself. tessel's ranks are MPI's: launch with mpirun -np {} tessel train ...",
                       n, n, n);
  if (const int n = count("SLURM_STEP_NUM_TASKS"); n > 1)
    return fmt::format("SLURM_STEP_NUM_TASKS={} says an srun step of {} tasks, but MPI sees this one alone: each "
                       "would train by itself. Launch with srun --mpi=pmix (or pmi2) tessel train ..., or mpirun "
                       "-np {} tessel train ... inside the allocation",
                       n, n, n);
  return "";
}

// Megatron's loss-scaling flags (optim/loss_scaler.h), with its defaults and meanings.
void add_loss_scale_flags(CLI::App& c, LossScaleOptions& o) {
  c.add_option_function<float>(
      "--loss-scale", [&o](const float& scale) { o.loss_scale = scale; },
      "static loss scale (with --fp16, --bf16 or --use-distributed-optimizer); not given (or 0): dynamic "
      "loss scaling with --fp16");
  c.add_option("--initial-loss-scale", o.initial_loss_scale, "initial dynamic loss scale")->capture_default_str();
  c.add_option("--min-loss-scale", o.min_loss_scale, "minimum dynamic loss scale")->capture_default_str();
  c.add_option("--loss-scale-window", o.loss_scale_window,
               "iterations without an overflow after which the dynamic scale doubles")
      ->capture_default_str();
  c.add_option("--hysteresis", o.hysteresis, "overflows (since the last growth) before the dynamic scale halves")
      ->capture_default_str();
}

// Megatron-LM's FP8 flags (transformer_config.py, arguments.py), with its defaults and choices.
void add_fp8_flags(CLI::App& c, Fp8Options& o) {
  c.add_option("--fp8-format", o.format,
               "FP8 GEMMs in the linear layers: e4m3 everywhere | hybrid (e4m3 forward, e5m2 gradients); on the "
               "CPU an exact emulation, slower than bf16, numerically the recipe's")
      ->check(CLI::IsMember({"e4m3", "hybrid"}));
  c.add_option("--fp8-recipe", o.recipe,
               "how each FP8 operand is scaled: delayed (amax history) | tensorwise (current amax) | blockwise "
               "(1x128 and 128x128 blocks) | mxfp8 (1x32 blocks, e8m0 scales) | custom")
      ->check(CLI::IsMember({"tensorwise", "delayed", "mxfp8", "blockwise", "custom"}))
      ->capture_default_str();
  c.add_option("--fp8-margin", o.margin, "delayed scaling: the scale divided by 2^margin")->capture_default_str();
  c.add_option("--fp8-amax-history-len", o.amax_history_len, "delayed scaling: the amaxes remembered")
      ->capture_default_str();
  c.add_option("--fp8-amax-compute-algo", o.amax_compute_algo,
               "delayed scaling: the history's most_recent amax, or its max")
      ->check(CLI::IsMember({"most_recent", "max"}))
      ->capture_default_str();
  c.add_flag("--first-last-layers-bf16", o.first_last_layers_bf16,
             "the first and last transformer layers without FP8 (not with --fp8-recipe delayed)");
  c.add_option("--num-layers-at-start-in-bf16", o.num_layers_at_start_in_bf16,
               "with --first-last-layers-bf16: the layers at the start without FP8")
      ->capture_default_str();
  c.add_option("--num-layers-at-end-in-bf16", o.num_layers_at_end_in_bf16,
               "with --first-last-layers-bf16: the layers at the end without FP8")
      ->capture_default_str();
  c.add_flag("--fp8-param-gather", o.param_gather,
             "the distributed optimizer's parameter all-gather in FP8 (needs --use-distributed-optimizer)");
}

}  // namespace

TrainCommand::TrainCommand(CLI::App& app) {
  cmd_ = app.add_subcommand("train", "train a model");
  CLI::App& c = *cmd_;
  TrainOptions& t = options_;
  t.data.path = {TESSEL_DEFAULT_DATA};
  decay_style_ = lr_decay_style_name(t.optim.lr.style);
  model_.add_to(c);
  global_batch_ = add_batch_flags(c, t.batch).global_batch;
  c.add_option("--step-batch-size-schedule", t.batch.step_schedule,
               "\"THRESHOLD:BATCH ...\": the global batch from each threshold of tokens consumed on (suffixes K, M, "
               "B, T), instead of --global-batch-size");
  c.add_flag("--decrease-batch-size-if-needed", t.batch.decrease_if_needed,
             "Megatron's rounding of the global batch down to a multiple of micro batch × DP: its evaluation "
             "batch must divide too, so here a batch that does not divide is refused (not with a schedule)");
  c.add_option("--rampup-batch-size", rampup_batch_size_,
               "deprecated and ignored, as in Megatron-LM: use --step-batch-size-schedule")
      ->expected(3);
  c.add_option("--train-iters", t.optim.lr.train_iters, "iterations (or --train-samples)");
  c.add_option("--train-samples", t.optim.lr.train_samples,
                                "samples to train on, instead of --train-iters (iterations: samples / "
                                "--global-batch-size)");
  c.add_option("--seed", t.seed, "seed of initialisation and of the datasets' shuffles")
      ->capture_default_str();
  c.add_option("--log-interval", t.log.interval, "iterations between log lines")->capture_default_str();
  c.add_option("--log-json", t.log.json, "write one JSON object per logged iteration");
  data_path_ = c.add_option("--data-path", t.data.path,
                            "PREFIX (.bin/.idx) or text file, or W1 P1 W2 P2 ... (a blend) for all splits")
                   ->capture_default_str();
  c.add_option("--train-data-path", t.data.train_path, "the train split's blend (instead of --data-path)");
  c.add_option("--valid-data-path", t.data.valid_path, "the valid split's blend");
  c.add_option("--test-data-path", t.data.test_path, "the test split's blend");
  c.add_flag("--mock-data", t.data.mock_data,
             "Megatron's generated documents instead of a corpus (with --tokenizer-type NullTokenizer)");
  c.add_option("--split", t.data.split, "train,valid,test proportions of --data-path's documents")
      ->capture_default_str();
  c.add_option("--data-cache-path", t.data.cache_path,
               "where the datasets' index files go (default: beside the data)");
  add_tokenizer_flags(c, t.data.tokenizer);
  c.add_flag("--reset-position-ids", t.data.reset_position_ids,
             "positions restart after each end-of-document token");
  c.add_flag("--reset-attention-mask", t.data.reset_attention_mask, "attention stays within each document");
  c.add_flag("--eod-mask-loss", t.data.eod_mask_loss, "no loss where the input is an end-of-document token");
  c.add_flag("--calculate-per-token-loss", t.batch.calculate_per_token_loss,
             "the gradient of the loss summed over the global batch's loss tokens and divided by their count "
             "(default: the mean of each microbatch's mean token loss); they differ only with masked tokens");
  c.add_option("--eval-interval", t.eval.interval, "iterations between evaluations on the valid split")
      ->capture_default_str();
  c.add_option("--eval-iters", t.eval.iters, "global batches per evaluation (0: none)")
      ->capture_default_str();
  c.add_option("--init-from", t.checkpoint.init_from, "start from a Hugging Face safetensors file or folder");
  c.add_option("--save-hf", t.checkpoint.save_hf, "write model.safetensors + config.json here at the end");
  c.add_option("--save-hf-model-type", t.checkpoint.save_hf_model_type,
               "a Gated DeltaNet model's config.json model_type and checkpoint layout for --save-hf "
               "(default: --init-from's, else qwen3_5_moe_text)")
      ->check(CLI::IsMember(export_model_types()));
  c.add_option("--save", t.checkpoint.save,
               "checkpoint folder (a save every --save-interval and at the end)");
  c.add_option("--save-interval", t.checkpoint.save_interval,
               "iterations between checkpoints (0: only at the end)")
      ->capture_default_str();
  c.add_flag("--async-save", t.checkpoint.async_save,
             "write checkpoints on a background thread while training goes on");
  c.add_option("--exit-interval", t.checkpoint.exit_interval,
               "stop once the iteration is a multiple of this (after saving)");
  c.add_option("--load", t.checkpoint.load, "resume from the newest checkpoint in this folder (any layout)");
  CheckpointOptions& ckpt = t.checkpoint;
  c.add_flag("--finetune", ckpt.finetune,
             "take --load's weights alone and train from iteration 0: the first samples, a fresh optimizer and "
             "learning-rate schedule");
  c.add_flag("--no-load-optim", ckpt.no_load_optim,
             "resume --load's weights and iteration with a fresh optimizer: zero Adam moments, the learning-rate "
             "schedule from its start");
  c.add_flag("--override-opt_param-scheduler,--override-opt-param-scheduler", ckpt.override_opt_param_scheduler,
             "resume with the learning-rate schedule the flags give where it differs from --load's save's");
  c.add_flag("--use-checkpoint-opt_param-scheduler,--use-checkpoint-opt-param-scheduler",
             ckpt.use_checkpoint_opt_param_scheduler,
             "resume with --load's save's learning-rate schedule (--lr, --min-lr, warmup, decay, --weight-decay) "
             "whatever the flags give");
  c.add_flag("--no-save-optim", ckpt.no_save_optim,
             "save the weights without Adam's moments (a resume from such a save starts the optimizer afresh)");
  c.add_flag("--no-load-rng", ckpt.no_load_rng,
             "no effect: tessel keeps no generator state to load (every draw is a function of --seed)");
  c.add_flag("--no-save-rng", ckpt.no_save_rng,
             "no effect: tessel keeps no generator state to save (every draw is a function of --seed)");
  implementation_.add_to(c);
  moe_.add_to(c, t.parallel.moe_token_dispatcher_type);
  unbuilt_.add_to(c);
  c.add_flag("--explain-flags", explain_flags_, "say at the start what tessel does with every flag given");
  c.add_option("--ckpt-format", t.checkpoint.ckpt_format,
               "Megatron-LM's checkpoint format: accepted; tessel saves and loads its own format")
      ->check(CLI::IsMember({"torch", "torch_dist", "torch_dcp", "fsdp_dtensor"}));
  c.add_flag("--auto-detect-ckpt-format", t.checkpoint.auto_detect_ckpt_format,
             "accepted: --load tells tessel's saves from Megatron-LM's checkpoints by their files");
  c.add_option("--dist-ckpt-strictness", t.checkpoint.dist_ckpt_strictness,
               "accepted: tessel's --load is always strict")
      ->check(CLI::IsMember({"assume_ok_unexpected", "log_unexpected", "log_all", "raise_unexpected", "raise_all",
                             "return_unexpected", "return_all", "ignore_all"}));
  c.add_option("--lr", t.optim.lr.lr, "peak learning rate")->capture_default_str();
  c.add_option("--min-lr", t.optim.lr.min_lr, "final learning rate")->capture_default_str();
  c.add_option_function<float>(
      "--decoupled-lr", [&t](const float& lr) { t.optim.decoupled_lr = lr; },
      "peak learning rate of the input embedding and the output layer (default: --lr), on the same schedule");
  c.add_option_function<float>(
      "--decoupled-min-lr", [&t](const float& lr) { t.optim.decoupled_min_lr = lr; },
      "final learning rate of the input embedding and the output layer (default: --min-lr)");
  c.add_option("--lr-warmup-iters", t.optim.lr.warmup_iters, "linear warmup iterations")->capture_default_str();
  c.add_option_function<int64_t>(
      "--lr-decay-iters", [&t](const int64_t& iters) { t.optim.lr.decay_iters = iters; },
      "decay iterations, at least 1 (default: --train-iters)");
  c.add_option("--lr-warmup-samples", t.optim.lr.warmup_samples, "linear warmup samples (with --train-samples)");
  c.add_option_function<int64_t>(
      "--lr-decay-samples", [&t](const int64_t& samples) { t.optim.lr.decay_samples = samples; },
      "decay samples, at least 1, with --train-samples (default: all of them)");
  c.add_option_function<double>(
      "--lr-warmup-fraction", [&t](const double& fraction) { t.optim.lr.warmup_fraction = fraction; },
      "warmup as a fraction of the decay, instead of --lr-warmup-iters or --lr-warmup-samples");
  c.add_option("--lr-warmup-init", t.optim.lr.warmup_init, "learning rate the warmup starts from")
      ->capture_default_str();
  c.add_option("--lr-decay-style", decay_style_, "constant | linear | cosine")->capture_default_str();
  c.add_option("--weight-decay", t.optim.adamw.weight_decay, "AdamW weight decay")->capture_default_str();
  c.add_option("--adam-beta1", t.optim.adamw.beta1, "AdamW beta1")->capture_default_str();
  c.add_option("--adam-beta2", t.optim.adamw.beta2, "AdamW beta2")->capture_default_str();
  c.add_option("--adam-eps", t.optim.adamw.eps, "AdamW epsilon")->capture_default_str();
  c.add_flag("--apply-wd-to-qk-layernorm", t.optim.adamw.apply_wd_to_qk_layernorm,
             "weight decay on the query and key norm weights too (Qwen3-Next's rule)");
  c.add_option("--no-weight-decay-cond-type", no_weight_decay_cond_type_,
               "deprecated in Megatron-LM: apply_wd_to_qk_layernorm (or the model zoo's qwen3_next) is "
               "--apply-wd-to-qk-layernorm")
      ->check(CLI::IsMember({"apply_wd_to_qk_layernorm", "qwen3_next"}));
  c.add_option("--clip-grad", t.optim.adamw.clip_grad, "gradient clipping by global norm (0: off)")
      ->capture_default_str();
  add_layout_flags(c, t.parallel.layout);
  add_sharding_flags(c, sharding_);
  add_schedule_flags(c, t.parallel.pipeline.schedule, t.parallel.pipeline.microbatch_group);
  add_stage_flags(c, t.parallel.pipeline);
  c.add_option("--cp-comm-type", t.parallel.cp_comm_type,
               "context parallel attention: p2p (ring) | all-gather")
      ->capture_default_str();
  c.add_option("--ddp-bucket-size", t.parallel.ddp.bucket_size, "gradients per DP reduction bucket (floats)")
      ->capture_default_str();
  add_overlap_flags(c, t.parallel.ddp.overlap_grad_reduce, t.optim.post_validation);
  add_recompute_flags(c, t.recompute);
  c.add_option("--recompute-modules", t.recompute.modules,
               "selective recompute: core_attn layernorm mlp moe moe_act shared_experts (default core_attn)");
  c.add_flag("--recompute-activations", t.recompute.activations,
             "selective recompute (Megatron's older flag)");
  c.add_flag("--progress", force_progress_,
             "draw the live progress line (default: on a terminal, not under mpirun)");
  c.add_option("--device", device_, "where to compute: cpu | cuda (a build with -DTESSEL_CUDA)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  c.add_flag_callback(
      "--bf16", [&t] { t.precision = Precision::BF16; },
      "bf16 mixed precision: GEMMs on bf16 operands, fp32 accumulation, fp32 master weights");
  c.add_flag_callback(
      "--fp16", [&t] { t.precision = Precision::FP16; },
      "fp16 mixed precision with loss scaling: GEMMs on fp16 operands (overflow to inf), fp32 accumulation, fp32 "
      "master weights; on the CPU an exact emulation, slower than fp32, numerically fp16's");
  add_loss_scale_flags(c, t.loss_scale);
  add_fp8_flags(c, t.fp8);
  logging_.add_to(c, t.log);
  add_thread_count_flag(c, "--threads", threads_, "threads per process (default: OMP_NUM_THREADS or all cores)");
  FaultOptions& f = t.faults;
  c.add_flag("--check-for-nan-in-loss-and-grad,!--no-check-for-nan-in-loss-and-grad", f.check_nan,
             "stop before the optimizer step when the loss or the gradient norm is not finite (default on; "
             "off: skip "
             "that step)");
  c.add_option(
       "--rerun-mode", f.rerun_mode,
       "validate_results: recompute a failing iteration once to tell a reproducible fault from a transient "
       "one | disabled")
      ->capture_default_str();
  c.add_flag("--check-for-spiky-loss", f.check_spiky_loss,
             "report a loss 10 times the largest of the first 100 (recomputed under validate_results)");
  c.add_option("--inject-fault", f.inject, "tests: nan-grad|transient-nan-grad|loss-spike:ITERATION[:RANK]");
  c.add_flag("--exit-signal-handler", f.exit_signal_handler,
             "on SIGTERM, SIGINT, SIGUSR1 or SIGUSR2: finish the iteration, save, exit 0");
  c.add_option("--exit-duration-in-mins", f.exit_duration_mins,
               "save and exit 0 after this many minutes (0: no limit)")
      ->capture_default_str();
  c.add_option("--distributed-timeout-minutes", f.distributed_timeout_minutes,
               "end the job when a communication waits this long without progress")
      ->capture_default_str();
  c.add_option("--distributed-timeout-seconds", f.distributed_timeout_seconds,
               "the same in seconds, for tests (0: the minutes)")
      ->capture_default_str();
  c.add_flag("--log-straggler", t.log.straggler,
             "every --log-interval: each rank's compute time against the median, the slowest named");
  c.add_option("--straggler-minmax-count", t.log.straggler_minmax_count, "slowest and fastest ranks named")
      ->capture_default_str();
}

void TrainCommand::run(MpiRuntime& runtime) {
  if (threads_ > 0) omp_set_num_threads(threads_);
  TrainOptions& t = options_;
  // The bundled corpus is the default for --data-path alone: per-split paths or mock data replace it.
  const bool per_split =
      !t.data.train_path.empty() || !t.data.valid_path.empty() || !t.data.test_path.empty();
  if ((per_split || t.data.mock_data) && data_path_->count() == 0) t.data.path.clear();
  // The live progress line for a terminal. Under mpirun every rank's stdout is a pseudo-terminal
  // whatever the user's is, so there it takes --progress.
  t.log.progress = force_progress_ || (isatty(STDOUT_FILENO) != 0 && !runtime.active());
  // A Hugging Face folder brings its tokenizer, as transformers' from_pretrained.
  if (!t.checkpoint.init_from.empty() && !tokenizer_flags_given(*cmd_))
    if (std::optional<TokenizerOptions> found = tokenizer_in_folder(t.checkpoint.init_from))
      t.data.tokenizer = *found;
  t.model_config = model_.model_file();
  if (explain_flags_) t.notes = ImplementationFlags::explain(*cmd_);
  if (!rampup_batch_size_.empty())
    t.notes.push_back("--rampup-batch-size is deprecated and ignored, as in Megatron-LM: use --step-batch-size-schedule");
  for (std::string& note : logging_.resolve(t.log)) t.notes.push_back(std::move(note));
  for (std::string& unused : implementation_.summary()) t.notes.push_back(std::move(unused));
  if (!no_weight_decay_cond_type_.empty()) {
    t.optim.adamw.apply_wd_to_qk_layernorm = true;
    t.notes.push_back(fmt::format("--no-weight-decay-cond-type {}: deprecated in Megatron-LM, taken as "
                                  "--apply-wd-to-qk-layernorm", no_weight_decay_cond_type_));
  }
  t.parallel.layout.world = runtime.world_size();
  if (runtime.world_size() == 1)
    if (const std::string why = launched_without_mpi(); !why.empty()) throw ConfigError(why);
  t.device = device_ == "cuda" ? Device::CUDA : Device::CPU;
  std::optional<TrainPlan> resolved;  // every rank alike, before any other communication
  check_together(runtime.world(), [&] {
    t.optim.lr.style = parse_lr_decay_style(decay_style_);
    ModelConfig model = model_.resolve(t.checkpoint.init_from);
    std::vector<std::string> v;
    if (t.optim.lr.train_iters == 0 && t.optim.lr.train_samples == 0)
      v.push_back("--train-iters or --train-samples is required (Megatron-LM has no default either)");
    // 0 stands for a global batch not given (micro batch × DP); given, it is refused as Megatron's.
    if (global_batch_->count() > 0 && t.batch.global_batch_size == 0)
      v.push_back("--global-batch-size must be positive (got 0)");
    if (cmd_->count("--bf16") > 0 && cmd_->count("--fp16") > 0)
      v.push_back("--fp16 and --bf16: give one, as Megatron-LM");
    moe_.apply(model, t.notes, v);
    resolve_sharding(sharding_, t.parallel.layout, v, t.notes);
    unbuilt_.check(t.notes, v);
    if (!v.empty()) {  // with the plan's rules, all in one message
      for (std::string& rule : training_plan_violations(model, t)) v.push_back(std::move(rule));
      throw ConfigError(fmt::format("invalid configuration: {}", fmt::join(v, "; ")));
    }
    resolved = plan_training(std::move(model), t);
  });
  const TrainPlan& plan = *resolved;
  set_distributed_timeout(t.faults.distributed_timeout());
  const DeviceMemory& memory = kernels_for(t.device, t.precision).memory;
  ProcessGroups groups = runtime.active()
                             ? ProcessGroups::create(Layout(plan.layout()), runtime.world_rank(), memory)
                             : ProcessGroups::single(memory);
  train(plan, groups);
}

}  // namespace tessel
