#include "tessel/train/evaluate.h"

#include "tessel/comm/comm.h"

namespace tessel {

Evaluator::Evaluator(const Kernels& k, const TrainPlan& plan, ProcessGroups& groups, const GptDataSplits& data,
                     PipelineExecutor& pipeline, const std::vector<std::unique_ptr<TransformerChunk>>& chunks)
    : k_(k), plan_(plan), groups_(groups), cp_(&groups.cp(), plan.cp_comm, k), data_(data), pipeline_(pipeline),
      chunks_(chunks) {}

std::optional<double> Evaluator::loss(Split split, int64_t first_sample) {
  const SampleDataset* data = data_.get(split);
  if (data == nullptr) return std::nullopt;
  // Made at the first evaluation: a run without any (a step schedule's, whose evaluation batch
  // may be too small for its pipeline schedule) needs none.
  if (forwards_.empty())
    forwards_ = lower(forward_only_schedule(generate_schedule(plan_.schedule)), plan_.schedule)[groups_.coords().pp];
  SplitLoader& loader = loaders_[static_cast<int>(split)];
  if (!loader.batches) {
    loader.batches = std::make_unique<BatchLoader>(*data, plan_.batch_shape(groups_.coords().dp),
                                                   plan_.packing());
    loader.microbatches = std::make_unique<MicrobatchLoader>(k_, *loader.batches, cp_);
  }
  const int64_t iters = plan_.options.eval.iters, G = plan_.options.batch.global_batch_size;
  const PipelineExecutor::FillFn fill = [&](int m, const std::vector<InputBuffer>& inputs) {
    loader.microbatches->fill(m, inputs);
  };
  double sums[2] = {0, 0};  // Σ token losses here, targets counted on this DP rank
  for (int64_t e = 0; e < iters; ++e) {
    const int64_t first = first_sample + e * G;
    // A batch that fails to read fails on its DP rank alone: agreed, as training's.
    check_together(groups_.world(), [&] {
      const int m = plan_.microbatches;
      loader.microbatches->start_batch({first, m}, e + 1 < iters ? BatchSpan{first + G, m} : BatchSpan{});
    });
    sums[0] += pipeline_.run_forward(forwards_, plan_.microbatches, fill);
    sums[1] += static_cast<double>(loader.microbatches->counted_targets());
  }
  // Losses come from the last stage's rows of every DP × CP rank; every rank counted the targets
  // of its DP rank's whole samples.
  groups_.pp().all_reduce(&sums[0], 1);
  groups_.dp_cp().all_reduce(&sums[0], 1);
  groups_.dp().all_reduce(&sums[1], 1);
  // As Megatron's validation, the LM loss alone: the step terms its forwards added (model/
  // step_terms.h) are not training's.
  for (const auto& c : chunks_) c->take_step_terms();
  return sums[0] / sums[1];
}

}  // namespace tessel
