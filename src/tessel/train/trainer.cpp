#include "tessel/train/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <optional>

#include "tessel/ckpt/checkpoint.h"
#include "tessel/ckpt/finite_weights.h"
#include "tessel/ckpt/hf.h"
#include "tessel/ckpt/hf_import.h"
#include "tessel/ckpt/save_lock.h"
#include "tessel/comm/comm.h"
#include "tessel/core/error.h"
#include "tessel/data/tokenizer_files.h"
#include "tessel/core/writable.h"
#include "tessel/kernels/cpu_isa.h"
#include "tessel/kernels/kernels.h"
#include "tessel/model/param_groups.h"
#include "tessel/model/transformer.h"
#include "tessel/parallel/grad_sync.h"
#include "tessel/pipeline/executor.h"
#include "tessel/train/comm_traffic.h"
#include "tessel/train/data.h"
#include "tessel/train/evaluate.h"
#include "tessel/train/export.h"
#include "tessel/train/loss_scales.h"
#include "tessel/train/metrics.h"
#include "tessel/train/model_state.h"
#include "tessel/train/microbatches.h"
#include "tessel/train/mixed_precision.h"
#include "tessel/train/numerics.h"
#include "tessel/train/report.h"
#include "tessel/train/resume.h"
#include "tessel/train/signals.h"
#include "tessel/train/terms.h"
#include "tessel/train/stage_model.h"
#include "tessel/train/step.h"
#include "tessel/train/straggler.h"

namespace tessel {

namespace {

using Clock = std::chrono::steady_clock;

// What a checkpoint records of the run besides the weights: the layout and the training flags.
nlohmann::json checkpoint_run_config(const TrainPlan& plan) {
  const ParallelConfig& pc = plan.layout();
  const TrainOptions& o = plan.options;
  return {{"tp", pc.tp}, {"pp", pc.pp}, {"vpp", pc.vpp}, {"cp", pc.cp}, {"ep", pc.ep},
          {"etp", pc.expert_tp()}, {"dp", plan.dp}, {"world", pc.world},
          {"distributed_optimizer", pc.distributed_optimizer},
          {"data_parallel_sharding_strategy", sharding_strategy_name(pc.strategy())},
          {"sequence_parallel", pc.sequence_parallel},
          {"micro_batch_size", o.batch.micro_batch_size},
          {"global_batch_size", o.batch.global_batch_size}, {"step_batch_size_schedule", o.batch.step_schedule},
          {"train_iters", plan.train_iters()}, {"tokenizer", tokenizer_identity(*plan.tokenizer)}};
}

// --save every --save-interval iterations, at --exit-interval, before the global batch changes
// (as Megatron's training loop, when the number of microbatches does) and at the end.
bool save_due(const TrainPlan& plan, int64_t it, bool exiting) {
  const CheckpointOptions& c = plan.options.checkpoint;
  const int64_t last = plan.train_iters();
  const bool batch_changes = it < last && plan.batches.batch_of(it + 1) != plan.batches.batch_of(it);
  return !c.save.empty() &&
         (exiting || it == last || batch_changes || (c.save_interval > 0 && it % c.save_interval == 0));
}

// The tokens of the global batch the loss counts: all of them, or (--eod-mask-loss) those whose
// input is no end-of-document token, counted by every DP rank over its samples.
double counted_tokens(const TrainPlan& plan, int64_t global_batch, const MicrobatchLoader& loader,
                      ProcessGroups& groups) {
  if (!plan.options.data.eod_mask_loss) return plan.batch_tokens(global_batch);
  double counted = static_cast<double>(loader.counted_targets());
  groups.dp().all_reduce(&counted, 1);
  return counted;
}

// The weight of each of this rank's `microbatches` token losses in the gradient, the batch's loss
// counting `counted` tokens (train/loss_scales.h).
std::vector<float> microbatch_scales(const TrainPlan& plan, const MicrobatchLoader& loader, int microbatches,
                                     double counted) {
  std::vector<int64_t> tokens;
  for (int m = 0; m < microbatches; ++m)
    tokens.push_back(plan.options.data.eod_mask_loss ? loader.counted_targets_of(m)
                                                     : plan.options.batch.micro_batch_size * plan.model.seq_length);
  return microbatch_loss_scales(plan.options.batch.calculate_per_token_loss, tokens, int64_t{microbatches} * plan.dp,
                                counted);
}

// The iteration's time, throughput and this rank's communication by group and kind of call; with
// `every_rank` (collective) every rank's too, with its peers, on the first rank.
void add_timing(IterationStats& s, Clock::time_point start, double batch_tokens, ProcessGroups& groups,
                bool every_rank) {
  const std::chrono::duration<double> took = Clock::now() - start;
  s.iteration_time_ms = took.count() * 1000.0;
  s.tokens_per_s = batch_tokens / took.count();
  for (const ProcessGroups::CommUse& use : groups.comm_uses())
    s.comm.push_back({group_kind_name(use.group), comm_op_name(use.op), use.counter.calls,
                      use.counter.bytes, use.counter.seconds});
  if (every_rank) s.traffic = gather_comm_traffic(groups);
}

// What a rank reads and creates before training: the train split's loader, the model
// (initialised, or read from --init-from), its gradient synchronisation and optimizer, the save
// resumed from, and the log. Nothing here communicates, so the ranks can check it all together
// (check_together) before any of them starts: a missing file or an unwritable folder is one
// error, reported once.
struct RunSetup {
  RunSetup(const Kernels& k, const TrainPlan& plan, ProcessGroups& groups, const TensorParallel& tp,
           const ContextParallel& cp, const SampleDataset& train_split)
      : batches(train_split, plan.batch_shape(groups.coords().dp), plan.packing()),
        loader(k, batches, cp),
        stage(k, plan, groups, tp, cp),
        sync(k, stage.params, groups, grad_sync_config(plan, stage, groups.coords().pp)),
        optimizer(k, stage.params, plan.options.optim.adamw, sync.owned_ranges()),
        loss_scaler(run_loss_scaling(plan.options), plan.options.loss_scale) {
    if (stage.init_deferred) stage.params.init_values(plan.options.seed, sync.owned_ranges());
    if (plan.options.optim.decoupled_lr)
      optimizer.set_decoupled_group([&model = plan.model](const Param& p) { return is_embedding_or_output_param(p, model); });
    const CheckpointOptions& ckpt = plan.options.checkpoint;
    if (!ckpt.init_from.empty() && !plan.loads_save) require_finite_weights(k, stage.params, ckpt.init_from);
    if (!ckpt.save.empty()) {
      require_writable_dir("--save", ckpt.save, groups.world_rank());
      // The tracker too: in a sticky folder, another user's would fail only at the first save.
      require_writable_file("--save", ckpt.save + "/latest_checkpointed_iteration.txt", groups.world_rank());
      // One writer per folder: the rank that writes its metadata and tracker holds the lock.
      if (groups.world_rank() == 0) save_lock = std::make_unique<SaveLock>(ckpt.save);
    }
    // Apart from what the run reads: the plan checked (train/output_paths.h).
    if (!ckpt.save_hf.empty()) require_writable_dir("--save-hf", ckpt.save_hf, groups.world_rank());
    // The data order and the learning rate depend on (seed, the plan's batches, step count) only:
    // resuming needs the weights, the moments and the step count, the plan having taken the
    // save's consumed samples and schedule (train/resume.h). As Megatron, a --load folder without
    // a save yet starts from scratch: the same command line (--save X --load X) starts a run and
    // resumes it after a crash (plan.loads_save).
    // --finetune takes the weights alone and starts at iteration 0; --no-load-optim, or a save
    // without the moments (--no-save-optim), leaves the optimizer fresh, its schedule from the start.
    // The plan checked the save's tokenizer (train/resume.h).
    if (plan.loads_save) {
      const bool with_optimizer = !ckpt.finetune && !ckpt.no_load_optim;
      saved = load_checkpoint(ckpt.load, stage.params, optimizer, plan.model, -1, with_optimizer);
      require_finite_weights(k, stage.params, checkpoint_iteration_dir(ckpt.load, saved));
      resumed = ckpt.finetune ? 0 : saved;
      const nlohmann::json meta = read_checkpoint_metadata(ckpt.load, saved);
      loaded_optimizer = with_optimizer && has_optimizer_state(meta);
      // The scaler's state is the optimizer's, as Megatron saves it (its state_dict's grad_scaler).
      const nlohmann::json& run = meta["run_config"];
      if (loaded_optimizer && run.contains("grad_scaler"))
        loss_scaler.restore(run["grad_scaler"], checkpoint_iteration_dir(ckpt.load, saved) + "/metadata.json");
    }
    // A save writes no file through a link: an iteration folder this run may save into that is one
    // is refused now, not at the save after the training up to it.
    if (!ckpt.save.empty()) require_no_linked_iteration_dirs(ckpt.save, resumed + 1, plan.train_iters());
    const bool first_rank = groups.world_rank() == 0;
    const LogOptions& l = plan.options.log;
    // The traces written at the end (by the first rank), checked before training, not after.
    if (first_rank && !l.pipeline_timeline.empty()) require_writable_file("--pipeline-timeline", l.pipeline_timeline);
    if (first_rank && l.profile.on) require_writable_file("--profile", l.profile.path);
    log = std::make_unique<TrainLog>(plan.train_iters(), l.interval, first_rank ? l.json : std::string(),
                                     l.progress && first_rank, !first_rank, resumed);
    // Fully sharded: the chunks gather each unit as they compute with it; the values set above
    // (initialised, read) are kept only in this rank's slices from now on.
    if (FullySharded* sharded = sync.fully_sharded()) {
      int first = 0;
      for (auto& chunk : stage.chunks) {
        chunk->set_weight_hooks(sharded, first);
        first += static_cast<int>(chunk->weight_units().size());
      }
      sharded->shard_values();
    }
  }

  BatchLoader batches;
  MicrobatchLoader loader;
  StageModel stage;
  GradSync sync;
  AdamW optimizer;
  LossScaler loss_scaler;
  std::unique_ptr<SaveLock> save_lock;  // on world rank 0, with --save
  int64_t saved = 0;    // the iteration of the save loaded
  int64_t resumed = 0;  // the iteration training goes on after (0 under --finetune)
  bool loaded_optimizer = false;
  std::unique_ptr<TrainLog> log;
};

// The run's setup, checked on every rank together.
std::unique_ptr<RunSetup> set_up(const Kernels& k, const TrainPlan& plan, ProcessGroups& groups,
                                 const TensorParallel& tp, const ContextParallel& cp,
                                 const GptDataSplits& data) {
  std::unique_ptr<RunSetup> setup;
  check_together(groups.world(), [&] {
    const SampleDataset* train_split = data.get(Split::Train);
    TESSEL_CHECK(train_split != nullptr, "--split {} leaves the train split no data",
                 plan.options.data.split);
    setup = std::make_unique<RunSetup>(k, plan, groups, tp, cp, *train_split);
  });
  return setup;
}

// The run's shape, and where it starts from.
void report_start(const TrainPlan& plan, ProcessGroups& groups, const GptDataSplits& data,
                  RunSetup& setup) {
  const TrainOptions& o = plan.options;
  TrainLog& log = *setup.log;
  for (const std::string& note : plan.notes) log.message(note);
  if (o.device == Device::CPU && cpu_kernels_are_avx2())
    log.message("TESSEL_CPU_ISA=avx2: the CPU kernels and oneDNN compute as on an AVX2-only CPU");
  report_run(log, plan, groups, setup.stage.params, data);
  if (o.eval.iters > 0 && data.get(Split::Valid) == nullptr)
    log.message("no validation: the valid split has no samples (see --split or --valid-data-path)");
  if (setup.save_lock && !setup.save_lock->stale_holder().empty())
    log.message(fmt::format("--save {}: took over the lock of a run that ended without releasing it "
                            "({}); removed {} unfinished files of its saves",
                            o.checkpoint.save, setup.save_lock->stale_holder(),
                            setup.save_lock->removed_leftovers()));
  const std::string& load = o.checkpoint.load;
  if (plan.loads_save && o.checkpoint.finetune)
    log.message(fmt::format("--finetune: the weights of {} (iteration {}), trained from iteration 0 with a fresh "
                            "optimizer", load, setup.saved));
  else if (plan.loads_save)
    log.message(fmt::format("resumed from {} after iteration {}{}", load, setup.resumed,
                            setup.loaded_optimizer ? ""
                            : o.checkpoint.no_load_optim
                                ? " with a fresh optimizer (--no-load-optim): Adam's moments and the learning-rate "
                                  "schedule start again"
                                : " with a fresh optimizer: the save holds no optimizer state (--no-save-optim); "
                                  "Adam's moments and the learning-rate schedule start again"));
  else if (!load.empty()) log.message(fmt::format("no save in {} yet: starting from scratch", load));
}

// Iteration `it`'s global batch in: it reads the train split's samples from those consumed before
// it on, as Megatron's sampler. A batch that fails to read (a token outside the vocabulary) fails
// on its DP rank alone.
IterationStats start_batch(int64_t it, const TrainPlan& plan, MicrobatchLoader& loader,
                           ProcessGroups& groups) {
  const BatchSpan batch = plan.batch_span(it);
  const double waited = loader.wait_seconds();
  check_together(groups.world(), [&] {
    loader.start_batch(batch, it < plan.train_iters() ? plan.batch_span(it + 1) : BatchSpan{});
  });
  IterationStats s;
  s.iteration = it;
  s.global_batch = plan.batches.batch_at(batch.first);
  s.data_wait_ms = 1e3 * (loader.wait_seconds() - waited);
  return s;
}

// An evaluation on `split` from its sample `first_sample` after iteration `after`, logged and
// checked; nothing when the split has no data. TensorBoard gets the test split's too, under the
// validation's tags, as Megatron writes it.
void evaluate(Evaluator& evaluator, TrainLog& log, RunMetrics& metrics, const NumericsGuard& numerics,
              Split split, int64_t after, int64_t first_sample) {
  const std::optional<double> loss = evaluator.loss(split, first_sample);
  if (!loss) return;
  log.evaluation(after, split_name(split), *loss);
  metrics.evaluation(after, *loss);
  numerics.check_evaluation(after, split_name(split), *loss);
}

// After the last iteration: as Megatron, the valid split once more (its next batches), then the
// test split; the end report; the Hugging Face export.
void end_of_run(const TrainPlan& plan, ProcessGroups& groups, RunSetup& setup, Evaluator& evaluator,
                RunMetrics& metrics, const NumericsGuard& numerics, RunTotals& totals) {
  const TrainOptions& o = plan.options;
  TrainLog& log = *setup.log;
  FullySharded* sharded = setup.sync.fully_sharded();
  if (o.eval.iters > 0) {
    const int64_t last = plan.train_iters();
    evaluate(evaluator, log, metrics, numerics, Split::Valid, last, plan.valid_samples_before(last / o.eval.interval));
    evaluate(evaluator, log, metrics, numerics, Split::Test, last, 0);
    if (sharded) sharded->shard_values();
  }
  ParamRegistry& params = setup.stage.params;
  totals.report(log, params, *setup.stage.chunks.front(), setup.loader.read_seconds_per_batch());
  if (o.log.profile_report) report_model_state(log, groups, setup.sync);
  const std::string& save_hf = o.checkpoint.save_hf;
  if (save_hf.empty()) return;
  // The export fails, if at all, on its writing rank after its communication: agreed on.
  if (sharded) sharded->gather_all();
  check_together(groups.world(), [&] {
    export_gathered(params, plan, groups);
    if (groups.world_rank() == 0) save_tokenizer_files(o.data.tokenizer, *plan.tokenizer, save_hf);
  });
  log.message(fmt::format("saved {}/model.safetensors, config.json and the tokenizer", save_hf));
}

}  // namespace

std::vector<IterationStats> train(const TrainPlan& plan, ProcessGroups& groups) {
  // 1. Flags to a plan: `plan`, every rule checked.
  const TrainOptions& o = plan.options;
  const ParallelConfig& pc = plan.layout();
  TESSEL_CHECK(groups.world().size() == pc.world, "the plan is for {} ranks, the job has {}",
               pc.world, groups.world().size());
  ExitRequest exit_request(o.faults);
  const Kernels& k = run_kernels(o);
  // 2. Groups and model: `groups`, and this rank's chunks, their gradient reductions and
  // optimizer, the data, the save resumed from.
  const TensorParallel tp{&groups.tp(), pc.sequence_parallel, &k};
  const ContextParallel cp{&groups.cp(), plan.cp_comm, k};
  const GptDataSplits data = build_training_data(plan, groups);
  const nlohmann::json run_config = checkpoint_run_config(plan);
  const std::unique_ptr<RunSetup> setup = set_up(k, plan, groups, tp, cp, data);
  StageModel& stage = setup->stage;
  ParamRegistry& params = stage.params;
  MicrobatchLoader& loader = setup->loader;
  GradSync& sync = setup->sync;
  TrainLog& log = *setup->log;
  report_start(plan, groups, data, *setup);

  // 3. The schedule: this pipeline rank's actions for an iteration's count of microbatches (one
  // count, or a step schedule's few), walked by the executor.
  std::map<int, RankSchedule> actions;
  const auto actions_of = [&](int microbatches) -> const RankSchedule& {
    auto [at, added] = actions.try_emplace(microbatches);
    if (added) {
      const ScheduleConfig schedule = plan.schedule_of(microbatches);
      at->second = lower(generate_schedule(schedule), schedule)[groups.coords().pp];
    }
    return at->second;
  };
  const bool packed = plan.packing().documents();
  PipelineExecutor pipeline(k, stage.pointers(), groups.pp(), plan.schedule,
                            {.tokens = loader.local_tokens(),
                             .packed_documents = packed,
                             .sequence_tokens = packed && cp.size() > 1 ? loader.sequence_tokens() : 0});
  Evaluator evaluator(k, plan, groups, data, pipeline, stage.chunks);
  NumericsGuard numerics(k, o.faults, params, groups, log);
  // 4–7. One computation of iteration `it` on its batch: the microbatches in, forward and
  // backward, the gradients reduced as they are finished; from the start each time (an earlier
  // computation's gradients and step terms are not this one's). The loss counts `counted` tokens,
  // each microbatch's token losses weigh `scales` in the gradient, the side losses among the
  // step's terms count `term_counted`.
  int64_t it = 0;
  int microbatches = 0;  // the iteration's
  double counted = 0;
  std::vector<float> scales;  // each microbatch's weight in the gradient
  const std::vector<StepTerm> terms = take_step_terms(stage.chunks);
  std::vector<std::vector<double>> term_counted;
  const TermGroups term_groups{.tokens = stage.token_group,
                               .pipeline = groups.pp(),
                               .data = groups.dp(),
                               .data_context = groups.dp_cp(),
                               .expert_parallel = groups.ep().size()};
  const PipelineExecutor::FillFn fill = [&](int m, const std::vector<InputBuffer>& inputs) {
    loader.fill(m, inputs);
  };
  const std::function<void()> arm = [&] { sync.arm(); };
  FullySharded* sharded = sync.fully_sharded();
  if (sharded) pipeline.set_before_compute([sharded](bool last) { sharded->begin_compute(last); });
  const std::function<void(int)> grad_ready = [&](int index) {
    numerics.before_reduction(it, index);
    sync.grad_ready(index);
  };
  // The loss scale multiplies every loss's gradient weight; the reduced gradients are divided by it
  // again before the norm and the step (optim/loss_scaler.h).
  LossScaler& loss_scaler = setup->loss_scaler;
  const bool loss_scaled = loss_scaler.scaling() != LossScaling::None;
  std::vector<float> scaled;  // `scales` times the loss scale
  const auto compute = [&] {
    sync.zero_grads();
    take_step_terms(stage.chunks);
    set_loss_scales(stage.chunks, terms, term_counted, loss_scaler.scale());
    scaled = scales;
    for (float& scale : scaled) scale *= loss_scaler.scale();
    const double loss_sum =
        pipeline.run(actions_of(microbatches), microbatches, fill, scaled, arm, grad_ready);
    sync.finish();
    if (loss_scaled) sync.scale_grads(loss_scaler.inv_scale());
    return loss_sum;
  };
  // 8. The step, and where its iterations go once final: Megatron's figures added, the log and
  // TensorBoard.
  std::vector<IterationStats> history;
  StragglerLog stragglers(o.log);
  std::unique_ptr<RunMetrics> metrics;
  check_together(groups.world(), [&] { metrics = std::make_unique<RunMetrics>(plan, groups, sync, setup->resumed + 1); });
  // A step is final here: the scaler learns whether it overflowed (was skipped), before the next
  // iteration's loss is scaled, and the log gets the scale it goes on with, as Megatron's.
  const auto record = [&](const IterationStats& s) {
    IterationStats& done = history.emplace_back(s);
    loss_scaler.update(done.skipped);
    if (loss_scaled) done.loss_scale = loss_scaler.state();
    metrics->complete(done);
    log.iteration(done);
    metrics->write(done);
    stragglers.add(done, log, groups);
  };
  TrainStep step(k, o.optim, plan.batches, setup->optimizer, numerics, groups,
                 {.compute = compute,
                  .stage_sq_sum = [&] { return sync.stage_sq_sum(); },
                  .gather_params = [&] { sync.gather_params(); },
                  .record = record});

  const CheckpointOptions& ckpt = o.checkpoint;
  CheckpointSaver saver(ckpt.async_save, !ckpt.no_save_optim, setup->save_lock.get());
  RunTotals totals(k, plan, groups);
  // The calls are listed for the pictures of the run and for who talks to whom (gathered from
  // every rank at the iterations --log-json logs, or each with --profile-report: a wait for the
  // slowest rank).
  groups.record_comm_calls(!o.log.json.empty() || o.log.profile_report || !o.log.pipeline_timeline.empty() ||
                           o.log.profile.on);
  std::optional<std::string> stop;  // why the run ends early (a signal, the time limit)
  for (it = setup->resumed + 1; it <= plan.train_iters(); ++it) {
    totals.start_iteration(it);
    groups.reset_comm_stats();
    const auto start = Clock::now();
    IterationStats s = start_batch(it, plan, loader, groups);
    microbatches = static_cast<int>(plan.batch_span(it).microbatches);
    counted = counted_tokens(plan, s.global_batch, loader, groups);
    scales = microbatch_scales(plan, loader, microbatches, counted);
    term_counted = count_term_tokens(terms, plan, s.global_batch, loader, groups);
    step.take(s, counted);
    add_term_figures(s, take_step_terms(stage.chunks), term_counted, term_groups);
    add_timing(s, start, plan.batch_tokens(s.global_batch), groups,
               o.log.profile_report || (!o.log.json.empty() && log.at_interval(it)));
    totals.add(s, pipeline.stats());
    step.record(s);
    // A --log-json record that could not be written (a full disk) stops the run at its iteration.
    if (!o.log.json.empty()) check_together(groups.world(), [&] { log.check(); });

    saver.poll(groups);
    stop = exit_request.poll(groups.world());
    const bool exiting = stop || (ckpt.exit_interval > 0 && it % ckpt.exit_interval == 0);
    const bool evaluating = o.eval.iters > 0 && it % o.eval.interval == 0;
    const bool saving = save_due(plan, it, exiting);
    // An evaluation, a save and what follows the loop read the validated parameters.
    if (evaluating || saving || exiting || it == plan.train_iters()) step.settle();
    if (evaluating) {
      evaluate(evaluator, log, *metrics, numerics, Split::Valid, it, plan.valid_samples_before(it / o.eval.interval - 1));
      if (sharded) sharded->shard_values();
    }
    if (saving) {
      if (sharded) sharded->gather_all();
      check_together(groups.world(), [&] {
        require_finite_weights(k, params, fmt::format("the save of iteration {}", it));
      });
      nlohmann::json config = run_config;
      config.update(resume_state(plan, it));
      if (loss_scaled) config["grad_scaler"] = loss_scaler.to_json();
      saver.save(ckpt.save, it, params, setup->optimizer, plan.model, pc.strategy() != ShardingStrategy::NoShard, o.seed, config,
                 groups);
      if (sharded) sharded->shard_values();
    }
    if (exiting) break;
  }
  if (o.optim.post_validation) log.message(step.post_validation().describe());
  saver.finish(groups);
  if (stop)
    log.message(ckpt.save.empty()
                    ? fmt::format("{}: stopped after iteration {}, without a save (no --save)", *stop, it)
                    : fmt::format("{}: stopped after iteration {}, saved {}", *stop, it,
                                  checkpoint_iteration_dir(ckpt.save, it)));
  else end_of_run(plan, groups, *setup, evaluator, *metrics, numerics, totals);
  if (!o.log.json.empty()) check_together(groups.world(), [&] { log.check(); });
  check_together(groups.world(), [&] { metrics->flush(); });
  return history;
}

}  // namespace tessel
