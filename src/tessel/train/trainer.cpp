#include "tessel/train/trainer.h"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <memory>

#include "tessel/ckpt/checkpoint.h"
#include "tessel/ckpt/hf.h"
#include "tessel/core/error.h"
#include "tessel/kernels/kernels.h"
#include "tessel/model/transformer.h"
#include "tessel/parallel/grad_sync.h"
#include "tessel/pipeline/executor.h"
#include "tessel/train/data.h"
#include "tessel/train/evaluate.h"
#include "tessel/train/export.h"
#include "tessel/train/microbatches.h"
#include "tessel/train/report.h"

namespace tessel {

namespace {

using Clock = std::chrono::steady_clock;

// This rank's part of the model: its pipeline stage's chunks (several with VPP), each split over
// TP and its experts over EP and ETP, all their parameters in one registry, initialised.
struct StageModel {
  StageModel(const Kernels& k, const TrainPlan& plan, ProcessGroups& groups,
             const TensorParallel& tp, const ContextParallel& cp) {
    const ParallelConfig& pc = plan.layout();
    // The ranks holding other rows of the same sequences (TP under sequence parallel, CP) count
    // the MoE auxiliary losses' tokens together.
    const bool split_rows = (pc.sequence_parallel && tp.size() > 1) || cp.size() > 1;
    token_group = split_rows ? &groups.tp_cp() : nullptr;
    const MoeGroups moe{.ep = &groups.ep(), .etp = &groups.etp(), .token_group = token_group};
    for (const ChunkSpec& spec : plan.stage_chunks(groups.coords().pp))
      chunks.push_back(std::make_unique<TransformerChunk>(
          k, plan.model, spec, plan.options.batch.micro_batch_size, tp, params, cp, moe));
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
// embedding group keeps them so; the norm counts the first stage's.
GradSyncConfig grad_sync_config(const TrainPlan& plan, const StageModel& stage, int pp_rank) {
  const ParallelConfig& pc = plan.layout();
  const bool owns_tied = plan.model.tied_embeddings() && pc.pp > 1 && pp_rank == 0;
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
          {"data_path", o.data.path}, {"tokenizer", plan.tokenizer->type()}};
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

// One evaluation's loss, logged; collective.
void log_evaluation(TrainLog& log, Evaluator& evaluator, Split split, int64_t it, int64_t index) {
  const std::optional<double> loss = evaluator.loss(split, index);
  if (loss) log.evaluation(it, split_name(split), *loss);
}

// The iteration's Σ token losses: only the last stage computed them; every rank learns their
// sum over the stages and the DP × CP ranks.
double global_loss_sum(double local, ProcessGroups& groups) {
  groups.pp().all_reduce(&local, 1);
  groups.dp_cp().all_reduce(&local, 1);
  return local;
}

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

}  // namespace

std::vector<IterationStats> train(const TrainPlan& plan, ProcessGroups& groups) {
  const TrainOptions& o = plan.options;
  const ParallelConfig& pc = plan.layout();
  TESSEL_CHECK(groups.world().size() == pc.world, "the plan is for {} ranks, the job has {}",
               pc.world, groups.world().size());
  const Kernels& k = kernels_for(o.device, o.precision);
  const RankCoords& at = groups.coords();
  const TensorParallel tp{&groups.tp(), pc.sequence_parallel, &k};
  const ContextParallel cp{&groups.cp(), plan.cp_comm, k};
  const GptDataSplits data = build_training_data(plan, groups);
  TESSEL_CHECK(data.get(Split::Train) != nullptr, "--split {} leaves the train split no data",
               o.data.split);
  BatchLoader train_batches(*data.get(Split::Train), plan.batch_shape(at.dp), plan.packing());
  MicrobatchLoader loader(k, train_batches, cp);
  StageModel stage(k, plan, groups, tp, cp);
  ParamRegistry& params = stage.params;
  GradSync sync(k, params, groups, grad_sync_config(plan, stage, at.pp));
  AdamW optimizer(k, params, o.optim.adamw, sync.owned_ranges());
  LrSchedule lr_schedule(o.optim.lr);

  // The data order and the learning rate depend on (seed, iteration) only: resuming needs no more
  // than the weights, the moments and the step count. As Megatron, a --load folder without a
  // save yet starts from scratch: the same command line (--save X --load X) starts a run and
  // resumes it after a crash.
  const CheckpointOptions& ckpt = o.checkpoint;
  const bool has_save =
      !ckpt.load.empty() && std::filesystem::exists(ckpt.load + "/latest_checkpointed_iteration.txt");
  const int64_t resumed = has_save ? load_checkpoint(ckpt.load, params, optimizer, plan.model) : 0;
  CheckpointSaver saver(ckpt.async_save);
  const nlohmann::json run_config = checkpoint_run_config(plan);

  const bool first_rank = groups.world_rank() == 0;
  TrainLog log(plan.train_iters(), o.log.interval, first_rank ? o.log.json : std::string(),
               o.log.progress && first_rank, !first_rank);
  report_run(log, plan, groups, params, data);
  if (has_save) log.message(fmt::format("resumed from {} after iteration {}", ckpt.load, resumed));
  else if (!ckpt.load.empty()) log.message(fmt::format("no save in {} yet: starting from scratch", ckpt.load));

  const RankSchedule actions = lower(generate_schedule(plan.schedule), plan.schedule)[at.pp];
  PipelineExecutor pipeline(k, stage.pointers(), groups.pp(), plan.schedule, loader.local_tokens(),
                            plan.packing().documents());
  Evaluator evaluator(k, plan, groups, cp, data, pipeline, stage.chunks);
  const std::function<void()> arm = [&] { sync.arm(); };
  const std::function<void(int)> grad_ready = [&](int index) { sync.grad_ready(index); };
  const PipelineExecutor::FillFn fill = [&](int m, const MicrobatchRows& rows) {
    loader.fill(m, rows);
  };
  const int64_t G = o.batch.global_batch_size;

  std::vector<IterationStats> history;
  RunTotals totals(k, plan);
  for (int64_t it = resumed + 1; it <= plan.train_iters(); ++it) {
    totals.start_iteration(it);
    groups.reset_comm_stats();
    const auto start = Clock::now();
    params.zero_grads();
    // Iteration it reads the train split's samples (it − 1)·G on, as Megatron's sampler.
    const double waited = loader.wait_seconds();
    loader.start_batch((it - 1) * G, it < plan.train_iters() ? it * G : -1);
    const double data_wait_ms = 1e3 * (loader.wait_seconds() - waited);
    // The loss is the mean over every counted token of the global batch (DESIGN invariant 1).
    const double counted = counted_tokens(plan, loader, groups);
    const double loss_sum = pipeline.run(actions, plan.microbatches, fill,
                                         static_cast<float>(1.0 / counted), arm, grad_ready);
    sync.finish();
    IterationStats s;
    s.iteration = it;
    s.grad_norm = sync.global_norm();
    optimizer.clip(static_cast<float>(s.grad_norm));
    s.lr = lr_schedule.at(it);
    optimizer.step(static_cast<float>(s.lr));
    sync.gather_params();

    s.loss = global_loss_sum(loss_sum, groups) / counted;
    add_router_stats(s, stage.chunks, groups, stage.token_group);
    add_timing(s, start, plan.batch_tokens(), groups);
    s.data_wait_ms = data_wait_ms;
    totals.add(s, pipeline.stats());
    log.iteration(s);
    history.push_back(s);
    if (o.eval.iters > 0 && it % o.eval.interval == 0)
      log_evaluation(log, evaluator, Split::Valid, it, it / o.eval.interval - 1);

    const bool exiting = ckpt.exit_interval > 0 && it % ckpt.exit_interval == 0;
    if (save_due(ckpt, it, plan.train_iters(), exiting))
      saver.save(ckpt.save, it, params, optimizer, plan.model, pc.distributed_optimizer, o.seed,
                 run_config, groups);
    if (exiting) break;
  }
  saver.finish(groups);
  // As Megatron, after training: the valid split once more (its next batches), then the test split.
  if (o.eval.iters > 0) {
    log_evaluation(log, evaluator, Split::Valid, plan.train_iters(),
                   plan.train_iters() / o.eval.interval);
    log_evaluation(log, evaluator, Split::Test, plan.train_iters(), 0);
  }
  totals.report(log, groups, params, *stage.chunks.front(), loader.read_seconds_per_batch());
  if (!ckpt.save_hf.empty()) {
    export_gathered(params, plan, groups);
    log.message(fmt::format("saved {}/model.safetensors and config.json", ckpt.save_hf));
  }
  return history;
}

}  // namespace tessel
