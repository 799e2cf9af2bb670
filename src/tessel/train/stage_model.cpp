#include "tessel/train/stage_model.h"

#include <algorithm>
#include <string>

#include "tessel/ckpt/hf_import.h"

namespace tessel {

StageModel::StageModel(const Kernels& k, const TrainPlan& plan, ProcessGroups& groups, const TensorParallel& tp,
                       const ContextParallel& cp) {
  // The ranks holding other rows of the same sequences (TP under sequence parallel, CP) count
  // the MoE auxiliary losses' tokens together.
  token_group = moe_rows_split(tp, cp.size()) ? &groups.tp_cp() : nullptr;
  const MoeGroups moe{.ep = &groups.ep(), .etp = &groups.etp(), .token_group = token_group,
                      .tp_ep = &groups.tp_ep(), .dispatcher = plan.moe_dispatcher};
  for (const ChunkSpec& spec : plan.stage_chunks(groups.coords().pp))
    chunks.push_back(std::make_unique<TransformerChunk>(
        k, params, plan.model,
        ChunkBuild{.spec = spec, .micro_batch = plan.options.batch.micro_batch_size,
                   .recompute = plan.options.recompute, .seed = plan.options.seed},
        ChunkGroups{.tp = tp, .cp = cp, .moe = moe}));
  params.finalize(k.memory);
  for (auto& c : chunks) c->bind(params);
  // A save in --load replaces these values: --init-from's are not read then (plan.notes says so).
  // With sharded parameters, each rank draws its own slices once they are known (RunSetup):
  // the whole model is never in one rank's memory.
  const std::string& init_from = plan.options.checkpoint.init_from;
  const bool drawn = init_from.empty() || plan.loads_save;
  init_deferred = drawn && plan.layout().strategy() == ShardingStrategy::OptimGradsParams;
  if (!drawn) load_hf_weights(params, plan.model, init_from);
  else if (!init_deferred) params.init_values(plan.options.seed);
}

GradSyncConfig grad_sync_config(const TrainPlan& plan, const StageModel& stage, int pp_rank) {
  const ParallelConfig& pc = plan.layout();
  const std::vector<ChunkSpec> mine = plan.stage_chunks(pp_rank);
  const bool head_here = std::any_of(mine.begin(), mine.end(), [](const ChunkSpec& c) { return c.has_head; });
  const bool owns_tied = plan.model.head_reads_embeddings() && pp_rank == 0 && !head_here;
  std::vector<WeightUnit> units;
  std::vector<int> chunk_first;
  for (const auto& chunk : stage.chunks) {
    chunk_first.push_back(static_cast<int>(units.size()));
    units.insert(units.end(), chunk->weight_units().begin(), chunk->weight_units().end());
  }
  return {.sequence_parallel = pc.sequence_parallel,
          .sharding = pc.strategy(),
          .reshard_after_forward = pc.reshards_after_forward(),
          .units = std::move(units),
          .chunk_first_unit = std::move(chunk_first),
          .bucket_floats = plan.options.parallel.ddp.bucket_size,
          .overlap = plan.options.parallel.ddp.overlap_grad_reduce,
          .is_expert = is_expert_param,
          .tied_owner = owns_tied ? stage.params.index(Embedding::word_embeddings_name(plan.model)) : -1,
          .tied_copy = stage.chunks.back()->tied_embedding_copy()};
}

}  // namespace tessel
