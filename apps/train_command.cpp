#include "train_command.h"

#include <fmt/format.h>
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

}  // namespace

TrainCommand::TrainCommand(CLI::App& app) {
  cmd_ = app.add_subcommand("train", "train a model");
  CLI::App& c = *cmd_;
  TrainOptions& t = options_;
  t.data.path = {TESSEL_DEFAULT_DATA};
  decay_style_ = lr_decay_style_name(t.optim.lr.style);
  model_.add_to(c);
  add_batch_flags(c, t.batch);
  iteration_flags_.emplace_back(c.add_option("--train-iters", t.optim.lr.train_iters, "iterations")->capture_default_str(),
                                &t.optim.lr.train_iters);
  train_samples_ = c.add_option("--train-samples", t.optim.lr.train_samples,
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
  c.add_option("--split", t.data.split, "train,valid,test proportions of --data-path's documents")
      ->capture_default_str();
  c.add_option("--data-cache-path", t.data.cache_path,
               "where the datasets' index files go (default: beside the data)");
  add_tokenizer_flags(c, t.data.tokenizer);
  c.add_flag("--reset-position-ids", t.data.reset_position_ids,
             "positions restart after each end-of-document token");
  c.add_flag("--reset-attention-mask", t.data.reset_attention_mask, "attention stays within each document");
  c.add_flag("--eod-mask-loss", t.data.eod_mask_loss, "no loss where the input is an end-of-document token");
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
  implementation_.add_to(c);
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
  iteration_flags_.emplace_back(
      c.add_option("--lr-warmup-iters", t.optim.lr.warmup_iters, "linear warmup iterations")->capture_default_str(),
      &t.optim.lr.warmup_iters);
  iteration_flags_.emplace_back(
      c.add_option("--lr-decay-iters", t.optim.lr.decay_iters, "decay iterations (0: --train-iters)")
          ->capture_default_str(),
      &t.optim.lr.decay_iters);
  c.add_option("--lr-warmup-samples", t.optim.lr.warmup_samples, "linear warmup samples (with --train-samples)");
  c.add_option("--lr-decay-samples", t.optim.lr.decay_samples, "decay samples (with --train-samples; 0: all of them)");
  c.add_option("--lr-warmup-fraction", t.optim.lr.warmup_fraction,
               "warmup as a fraction of the decay, instead of --lr-warmup-iters or --lr-warmup-samples");
  c.add_option("--lr-warmup-init", t.optim.lr.warmup_init, "learning rate the warmup starts from")
      ->capture_default_str();
  c.add_option("--lr-decay-style", decay_style_, "constant | linear | cosine")->capture_default_str();
  c.add_option("--weight-decay", t.optim.adamw.weight_decay, "AdamW weight decay")->capture_default_str();
  c.add_option("--adam-beta1", t.optim.adamw.beta1, "AdamW beta1")->capture_default_str();
  c.add_option("--adam-beta2", t.optim.adamw.beta2, "AdamW beta2")->capture_default_str();
  c.add_option("--adam-eps", t.optim.adamw.eps, "AdamW epsilon")->capture_default_str();
  c.add_option("--clip-grad", t.optim.adamw.clip_grad, "gradient clipping by global norm (0: off)")
      ->capture_default_str();
  add_layout_flags(c, t.parallel.layout);
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
  logging_.add_to(c, t.log);
  c.add_option("--threads", threads_, "threads per process (default: OMP_NUM_THREADS or all cores)");
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
  // The bundled corpus is the default for --data-path alone: per-split paths replace it.
  const bool per_split =
      !t.data.train_path.empty() || !t.data.valid_path.empty() || !t.data.test_path.empty();
  if (per_split && data_path_->count() == 0) t.data.path.clear();
  // The live progress line for a terminal. Under mpirun every rank's stdout is a pseudo-terminal
  // whatever the user's is, so there it takes --progress.
  t.log.progress = force_progress_ || (isatty(STDOUT_FILENO) != 0 && !runtime.active());
  // A Hugging Face folder brings its tokenizer, as transformers' from_pretrained.
  if (!t.checkpoint.init_from.empty() && !tokenizer_flags_given(*cmd_))
    if (std::optional<TokenizerOptions> found = tokenizer_in_folder(t.checkpoint.init_from))
      t.data.tokenizer = *found;
  // Sample-based training (--train-samples): tessel's iteration-based defaults step aside.
  if (train_samples_->count() > 0)
    for (const auto& [flag, value] : iteration_flags_)
      if (flag->count() == 0) *value = 0;
  if (explain_flags_) t.notes = ImplementationFlags::explain(*cmd_);
  for (std::string& note : logging_.resolve(t.log)) t.notes.push_back(std::move(note));
  if (const std::string unused = implementation_.summary(); !unused.empty()) t.notes.push_back(unused);
  t.parallel.layout.world = runtime.world_size();
  if (runtime.world_size() == 1)
    if (const std::string why = launched_without_mpi(); !why.empty()) throw ConfigError(why);
  t.device = device_ == "cuda" ? Device::CUDA : Device::CPU;
  std::optional<TrainPlan> resolved;  // every rank alike, before any other communication
  check_together(runtime.world(), [&] {
    t.optim.lr.style = parse_lr_decay_style(decay_style_);
    resolved = plan_training(model_.resolve(t.checkpoint.init_from), t);
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
