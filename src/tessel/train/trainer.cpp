#include "tessel/train/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>

#include "tessel/ckpt/checkpoint.h"
#include "tessel/ckpt/hf.h"
#include "tessel/comm/comm.h"
#include "tessel/core/error.h"
#include "tessel/data/tokenizer_files.h"
#include "tessel/core/writable.h"
#include "tessel/kernels/kernels.h"
#include "tessel/optim/post_validation.h"
#include "tessel/model/transformer.h"
#include "tessel/parallel/grad_sync.h"
#include "tessel/pipeline/executor.h"
#include "tessel/train/data.h"
#include "tessel/train/evaluate.h"
#include "tessel/train/export.h"
#include "tessel/train/microbatches.h"
#include "tessel/train/numerics.h"
#include "tessel/train/report.h"
#include "tessel/train/signals.h"
#include "tessel/train/straggler.h"

namespace tessel {

namespace {

using Clock = std::chrono::steady_clock;

// This rank's part of the model: its pipeline stage's chunks (several with VPP), each split over
// TP and its experts over EP and ETP, all their parameters in one registry, initialised.
struct StageModel {
  StageModel(const Kernels& k, const TrainPlan& plan, ProcessGroups& groups,
             const TensorParallel& tp, const ContextParallel& cp) {
    // The ranks holding other rows of the same sequences (TP under sequence parallel, CP) count
    // the MoE auxiliary losses' tokens together.
    token_group = moe_rows_split(tp, cp.size()) ? &groups.tp_cp() : nullptr;
    const MoeGroups moe{.ep = &groups.ep(), .etp = &groups.etp(), .token_group = token_group};
    for (const ChunkSpec& spec : plan.stage_chunks(groups.coords().pp))
      chunks.push_back(std::make_unique<TransformerChunk>(k, plan.model, spec,
                                                          plan.options.batch.micro_batch_size, tp,
                                                          params, cp, moe, plan.options.recompute));
    params.finalize(k.memory);
    for (auto& c : chunks) c->bind(params);
    const std::string& init_from = plan.options.checkpoint.init_from;
    if (init_from.empty()) params.init_values(plan.options.seed);
    else load_hf_weights(params, plan.model, init_from);
  }

  std::vector<TransformerChunk*> pointers() const {
    std::vector<TransformerChunk*> p;
    for (const auto& c : chunks) p.push_back(c.get());
    return p;
  }

  ParamRegistry params;
  std::vector<std::unique_ptr<TransformerChunk>> chunks;
  Comm* token_group = nullptr;
};

// Gradient synchronisation of this rank's parameters. A tied embedding lives on the first and
// the last stage; both copies start equal (same seed and name, or the same file) and the
// embedding group keeps them so; the norm counts the first stage's. In a V the first stage
// holds the head too: one embedding, no group.
GradSyncConfig grad_sync_config(const TrainPlan& plan, const StageModel& stage, int pp_rank) {
  const ParallelConfig& pc = plan.layout();
  const std::vector<ChunkSpec> mine = plan.stage_chunks(pp_rank);
  const bool head_here = std::any_of(mine.begin(), mine.end(), [](const ChunkSpec& c) { return c.has_head; });
  const bool owns_tied = plan.model.tied_embeddings() && pp_rank == 0 && !head_here;
  return {.sequence_parallel = pc.sequence_parallel,
          .distributed_optimizer = pc.distributed_optimizer,
          .bucket_floats = plan.options.parallel.ddp.bucket_size,
          .overlap = plan.options.parallel.ddp.overlap_grad_reduce,
          .is_expert = is_expert_param,
          .tied_owner = owns_tied ? stage.params.index("transformer.wte.weight") : -1,
          .tied_copy = stage.chunks.back()->tied_embedding_copy()};
}

// What a checkpoint records of the run besides the weights: the layout and the training flags.
nlohmann::json checkpoint_run_config(const TrainPlan& plan) {
  const ParallelConfig& pc = plan.layout();
  const TrainOptions& o = plan.options;
  return {{"tp", pc.tp}, {"pp", pc.pp}, {"vpp", pc.vpp}, {"cp", pc.cp}, {"ep", pc.ep},
          {"etp", pc.expert_tp()}, {"dp", plan.dp}, {"world", pc.world},
          {"distributed_optimizer", pc.distributed_optimizer},
          {"sequence_parallel", pc.sequence_parallel},
          {"micro_batch_size", o.batch.micro_batch_size},
          {"global_batch_size", o.batch.global_batch_size}, {"train_iters", plan.train_iters()},
          {"data_path", o.data.path}, {"tokenizer", tokenizer_identity(*plan.tokenizer)}};
}

// A run resumes with the tokenizer its save was trained with.
void check_saved_tokenizer(const std::string& dir, const nlohmann::json& current) {
  const nlohmann::json meta = read_checkpoint_metadata(dir);
  const nlohmann::json& saved = meta.at("run_config").at("tokenizer");
  const std::string why = tokenizer_mismatch(saved, current);
  if (!why.empty())
    throw Error(fmt::format("--load {}: {}; give the tokenizer flags it was trained with", dir, why));
}

// --save every --save-interval iterations, at --exit-interval and at the end.
bool save_due(const CheckpointOptions& c, int64_t it, int64_t last, bool exiting) {
  return !c.save.empty() && (exiting || it == last || (c.save_interval > 0 && it % c.save_interval == 0));
}

// The tokens of the global batch the loss counts: all of them, or (--eod-mask-loss) those whose
// input is no end-of-document token, counted by every DP rank over its samples.
double counted_tokens(const TrainPlan& plan, const MicrobatchLoader& loader, ProcessGroups& groups) {
  if (!plan.options.data.eod_mask_loss) return plan.batch_tokens();
  double counted = static_cast<double>(loader.counted_targets());
  groups.dp().all_reduce(&counted, 1);
  return counted;
}

// The iteration's Σ token losses: only the last stage computed them; every rank learns their
// sum over the stages and the DP × CP ranks.
double global_loss_sum(double local, ProcessGroups& groups) {
  groups.pp().all_reduce(&local, 1);
  groups.dp_cp().all_reduce(&local, 1);
  return local;
}

// An eagerly taken step awaiting its iteration's gradient norm and loss, summed over the pipeline
// stages while the next iteration runs (optimizer post-validation).
struct PendingStep {
  bool active = false;
  IterationStats stats;
  double sq = 0, loss = 0;  // this stage's Σ g² and token losses, summed over the stages on arrival
  double counted = 0;       // the iteration's counted tokens
  Request sq_sum, loss_sum;

  // The stage's sums are in; their sum over the stages starts (the loss's over DP × CP first).
  void start(double stage_sq, double loss_sum_here, double counted_tokens, ProcessGroups& groups) {
    active = true;
    counted = counted_tokens;
    sq = stage_sq;
    loss = loss_sum_here;
    groups.dp_cp().all_reduce(&loss, 1);
    sq_sum = groups.pp().all_reduce_async(&sq, 1);
    loss_sum = groups.pp().all_reduce_async(&loss, 1);
  }
};

// What optimizer post-validation did with the run's steps, for its end report.
struct PostValidationCounts {
  int64_t kept = 0;        // taken before the norm and valid
  int64_t redone = 0;      // taken before the norm, undone and redone when it arrived
  int64_t rerun = 0;       // iterations run again because they ran on a step since redone
  int64_t after_norm = 0;  // plain steps, taken after the norm (the last verdict was not Plain)

  std::string describe() const {
    return fmt::format(
        "optimizer post-validation: {} steps taken before their gradient norm and kept, {} redone "
        "({} iterations run again), {} taken after the norm as the step before had been changed",
        kept, redone, rerun, after_norm);
  }
};

// The iteration's time, throughput and this rank's communication by group and kind of call.
void add_timing(IterationStats& s, Clock::time_point start, double batch_tokens,
                ProcessGroups& groups) {
  const std::chrono::duration<double> took = Clock::now() - start;
  s.iteration_time_ms = took.count() * 1000.0;
  s.tokens_per_s = batch_tokens / took.count();
  for (const ProcessGroups::CommUse& use : groups.comm_uses())
    s.comm.push_back({group_kind_name(use.group), comm_op_name(use.op), use.counter.calls,
                      use.counter.bytes, use.counter.seconds});
}

// What a rank reads and creates before training: the train split's loader, the model
// (initialised, or read from --init-from), its gradient synchronisation and optimizer, the save
// resumed from, and the log. Nothing here communicates, so the ranks can check it all together
// (check_together) before any of them starts: a missing file or an unwritable folder is one
// error, reported once.
struct RunSetup {
  RunSetup(const Kernels& k, const TrainPlan& plan, ProcessGroups& groups, const TensorParallel& tp,
           const ContextParallel& cp, const SampleDataset& train_split,
           const nlohmann::json& run_config)
      : batches(train_split, plan.batch_shape(groups.coords().dp), plan.packing()),
        loader(k, batches, cp),
        stage(k, plan, groups, tp, cp),
        sync(k, stage.params, groups, grad_sync_config(plan, stage, groups.coords().pp)),
        optimizer(k, stage.params, plan.options.optim.adamw, sync.owned_ranges()) {
    const CheckpointOptions& ckpt = plan.options.checkpoint;
    if (!ckpt.init_from.empty()) require_finite_weights(k, stage.params, ckpt.init_from);
    if (!ckpt.save.empty()) require_writable_dir("--save", ckpt.save, groups.world_rank());
    if (!ckpt.save_hf.empty()) require_writable_dir("--save-hf", ckpt.save_hf, groups.world_rank());
    // The data order and the learning rate depend on (seed, iteration) only: resuming needs no
    // more than the weights, the moments and the step count. As Megatron, a --load folder without
    // a save yet starts from scratch: the same command line (--save X --load X) starts a run and
    // resumes it after a crash.
    has_save = !ckpt.load.empty() &&
               std::filesystem::exists(ckpt.load + "/latest_checkpointed_iteration.txt");
    if (has_save) {
      check_saved_tokenizer(ckpt.load, run_config.at("tokenizer"));
      resumed = load_checkpoint(ckpt.load, stage.params, optimizer, plan.model);
      require_finite_weights(k, stage.params, checkpoint_iteration_dir(ckpt.load, resumed));
    }
    const bool first_rank = groups.world_rank() == 0;
    const LogOptions& l = plan.options.log;
    log = std::make_unique<TrainLog>(plan.train_iters(), l.interval, first_rank ? l.json : std::string(),
                                     l.progress && first_rank, !first_rank, resumed);
  }

  BatchLoader batches;
  MicrobatchLoader loader;
  StageModel stage;
  GradSync sync;
  AdamW optimizer;
  bool has_save = false;
  int64_t resumed = 0;
  std::unique_ptr<TrainLog> log;
};

}  // namespace

std::vector<IterationStats> train(const TrainPlan& plan, ProcessGroups& groups) {
  const TrainOptions& o = plan.options;
  const ParallelConfig& pc = plan.layout();
  TESSEL_CHECK(groups.world().size() == pc.world, "the plan is for {} ranks, the job has {}",
               pc.world, groups.world().size());
  ExitRequest exit_request(o.faults);
  const Kernels& k = kernels_for(o.device, o.precision);
  const RankCoords& at = groups.coords();
  const TensorParallel tp{&groups.tp(), pc.sequence_parallel, &k};
  const ContextParallel cp{&groups.cp(), plan.cp_comm, k};
  const GptDataSplits data = build_training_data(plan, groups);
  const nlohmann::json run_config = checkpoint_run_config(plan);
  std::unique_ptr<RunSetup> setup;
  check_together(groups.world(), [&] {
    const SampleDataset* train_split = data.get(Split::Train);
    TESSEL_CHECK(train_split != nullptr, "--split {} leaves the train split no data", o.data.split);
    setup = std::make_unique<RunSetup>(k, plan, groups, tp, cp, *train_split, run_config);
  });
  StageModel& stage = setup->stage;
  ParamRegistry& params = stage.params;
  MicrobatchLoader& loader = setup->loader;
  GradSync& sync = setup->sync;
  AdamW& optimizer = setup->optimizer;
  TrainLog& log = *setup->log;
  LrSchedule lr_schedule(o.optim.lr);
  const CheckpointOptions& ckpt = o.checkpoint;
  CheckpointSaver saver(ckpt.async_save);

  report_run(log, plan, groups, params, data);
  if (o.eval.iters > 0 && data.get(Split::Valid) == nullptr)
    log.message("no validation: the valid split has no samples (see --split or --valid-data-path)");
  if (setup->has_save)
    log.message(fmt::format("resumed from {} after iteration {}", ckpt.load, setup->resumed));
  else if (!ckpt.load.empty()) log.message(fmt::format("no save in {} yet: starting from scratch", ckpt.load));

  const RankSchedule actions = lower(generate_schedule(plan.schedule), plan.schedule)[at.pp];
  PipelineExecutor pipeline(k, stage.pointers(), groups.pp(), plan.schedule, loader.local_tokens(),
                            plan.packing().documents());
  Evaluator evaluator(k, plan, groups, cp, data, pipeline, stage.chunks);
  NumericsGuard numerics(k, o.faults, params, groups, log);
  int64_t it = 0;
  const std::function<void()> arm = [&] { sync.arm(); };
  const std::function<void(int)> grad_ready = [&](int index) {
    numerics.before_reduction(it, index);
    sync.grad_ready(index);
  };
  const PipelineExecutor::FillFn fill = [&](int m, const MicrobatchRows& rows) { loader.fill(m, rows); };
  double counted = 0;  // the global batch's tokens the loss counts
  // One iteration's forward, backward and gradient reductions on the current batch; numerics
  // may run it twice. The loss is the mean over every counted token (DESIGN invariant 1).
  const auto run_pipeline = [&] {
    params.zero_grads();
    const double loss_sum = pipeline.run(actions, plan.microbatches, fill,
                                         static_cast<float>(1.0 / counted), arm, grad_ready);
    sync.finish();
    return loss_sum;
  };
  const NumericsGuard::Recompute compute = [&] {
    const double loss_sum = run_pipeline();
    const double norm = sync.global_norm();
    return NumericsGuard::Result{global_loss_sum(loss_sum, groups) / counted, norm};
  };
  const auto evaluate = [&](Split split, int64_t after, int64_t index) {
    const std::optional<double> loss = evaluator.loss(split, index);
    if (!loss) return;
    log.evaluation(after, split_name(split), *loss);
    numerics.check_evaluation(after, split_name(split), *loss);
  };
  const int64_t G = o.batch.global_batch_size;

  std::vector<IterationStats> history;
  RunTotals totals(k, plan, groups);
  StragglerLog stragglers(o.log);
  std::optional<std::string> stop;  // why the run ends early (a signal, the time limit)
  // Optimizer post-validation: the pending step, validated once its norm arrives (settle). A step
  // it redoes makes the iteration since run on the undone parameters run again, so it steps
  // before the norm only while the last verdict was Plain: once clipping or a non-finite norm has
  // changed a step, the plain step is taken until a norm needs neither (a run that clips for a
  // stretch reruns one iteration, not each). Without the plain step's recomputation, a
  // non-finite norm under --check-for-nan-in-loss-and-grad stops the run in settle.
  std::optional<EagerStep> eager;  // its copy of the state costs the parameters' size four times
  if (o.optim.post_validation) eager.emplace(k, optimizer, params);
  PendingStep pending;
  bool step_before_norm = o.optim.post_validation;
  PostValidationCounts post_validation;
  auto record = [&](IterationStats& s, StepVerdict verdict) {
    s.skipped = verdict == StepVerdict::Skipped;
    log.iteration(s);
    stragglers.add(s, log, groups);
    history.push_back(s);
  };
  auto settle = [&] {
    pending.active = false;
    pending.sq_sum.wait();
    pending.loss_sum.wait();
    IterationStats& s = pending.stats;
    s.grad_norm = std::sqrt(pending.sq);
    s.loss = pending.loss / pending.counted;
    numerics.check_settled(s.iteration, s.loss);
    if (o.faults.check_nan && !(std::isfinite(s.grad_norm) && std::isfinite(s.loss)))
      throw JobError(fmt::format(
          "iteration {}: loss {:.6g} and gradient norm {:.6g}: not finite "
          "(--check-for-nan-in-loss-and-grad; the step post-validation took is not kept)",
          s.iteration, s.loss, s.grad_norm));
    const StepVerdict verdict = eager->validate(s.grad_norm);
    if (verdict != StepVerdict::Plain) sync.gather_params();
    record(s, verdict);
    step_before_norm = verdict == StepVerdict::Plain;
    ++(step_before_norm ? post_validation.kept : post_validation.redone);
    return verdict;
  };

  for (it = setup->resumed + 1; it <= plan.train_iters(); ++it) {
    totals.start_iteration(it);
    groups.reset_comm_stats();
    const auto start = Clock::now();
    // Iteration it reads the train split's samples (it − 1)·G on, as Megatron's sampler. A batch
    // that fails to read (a token outside the vocabulary) fails on its DP rank alone.
    const double waited = loader.wait_seconds();
    check_together(groups.world(), [&] {
      loader.start_batch((it - 1) * G, it < plan.train_iters() ? it * G : -1);
    });
    IterationStats s;
    s.iteration = it;
    s.data_wait_ms = 1e3 * (loader.wait_seconds() - waited);
    counted = counted_tokens(plan, loader, groups);
    s.lr = lr_schedule.at(optimizer.step_count() + 1);  // a skipped step does not advance it
    StepVerdict verdict = StepVerdict::Plain;
    if (step_before_norm) {
      const double loss_sum = run_pipeline();
      if (pending.active && settle() != StepVerdict::Plain) {
        // This iteration ran on parameters since undone: it runs again, to the plain step.
        for (auto& c : stage.chunks) c->take_router_totals();
        numerics.iteration_rerun();
        s.lr = lr_schedule.at(optimizer.step_count() + 1);
        ++post_validation.rerun;
      } else {
        pending.start(sync.stage_sq_sum(), loss_sum, counted, groups);
        eager->step(static_cast<float>(s.lr));
        sync.gather_params();
      }
    }
    if (!pending.active) {
      if (o.optim.post_validation) ++post_validation.after_norm;
      NumericsGuard::Result result = compute();
      const bool finite = numerics.check(it, result, compute);
      s.loss = result.loss;
      s.grad_norm = result.grad_norm;
      verdict = finite ? checked_step(optimizer, s.grad_norm, static_cast<float>(s.lr))
                       : StepVerdict::Skipped;
      if (verdict != StepVerdict::Skipped) sync.gather_params();
      step_before_norm = o.optim.post_validation && verdict == StepVerdict::Plain;
    }

    add_router_stats(s, stage.chunks, groups, stage.token_group);
    add_timing(s, start, plan.batch_tokens(), groups);
    totals.add(s, pipeline.stats());
    if (pending.active) pending.stats = s;
    else record(s, verdict);
    if (o.eval.iters > 0 && it % o.eval.interval == 0) {
      if (pending.active) settle();  // evaluated on the validated parameters
      evaluate(Split::Valid, it, it / o.eval.interval - 1);
    }

    saver.poll(groups);
    stop = exit_request.poll(groups.world());
    const bool exiting = stop || (ckpt.exit_interval > 0 && it % ckpt.exit_interval == 0);
    if (save_due(ckpt, it, plan.train_iters(), exiting)) {
      if (pending.active) settle();
      check_together(groups.world(), [&] {
        require_finite_weights(k, params, fmt::format("the save of iteration {}", it));
      });
      saver.save(ckpt.save, it, params, optimizer, plan.model, pc.distributed_optimizer, o.seed,
                 run_config, groups);
    }
    if (exiting) break;
  }
  if (pending.active) settle();
  if (o.optim.post_validation) log.message(post_validation.describe());
  saver.finish(groups);
  if (stop) {
    log.message(ckpt.save.empty()
                    ? fmt::format("{}: stopped after iteration {}, without a save (no --save)", *stop, it)
                    : fmt::format("{}: stopped after iteration {}, saved {}", *stop, it,
                                  checkpoint_iteration_dir(ckpt.save, it)));
    return history;
  }
  // As Megatron, after training: the valid split once more (its next batches), then the test split.
  if (o.eval.iters > 0) {
    evaluate(Split::Valid, plan.train_iters(), plan.train_iters() / o.eval.interval);
    evaluate(Split::Test, plan.train_iters(), 0);
  }
  totals.report(log, params, *stage.chunks.front(), loader.read_seconds_per_batch());
  if (!ckpt.save_hf.empty()) {
    // The export fails, if at all, on its writing rank after its communication: agreed on.
    check_together(groups.world(), [&] {
      export_gathered(params, plan, groups);
      if (groups.world_rank() == 0) save_tokenizer_files(o.data.tokenizer, *plan.tokenizer, ckpt.save_hf);
    });
    log.message(fmt::format("saved {}/model.safetensors, config.json and the tokenizer", ckpt.save_hf));
  }
  return history;
}

}  // namespace tessel
