// Evaluation as Megatron's evaluate(): --eval-iters global batches of the valid (or test) split,
// forward only through the same pipeline — the schedule's forwards alone — the loss the mean over
// every counted token of those batches. Megatron's validation iterator goes on from one
// evaluation to the next, so evaluation number i reads the split's batches i·eval_iters on.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <vector>

#include "tessel/data/batches.h"
#include "tessel/data/dataset_builder.h"
#include "tessel/kernels/kernels.h"
#include "tessel/model/transformer.h"
#include "tessel/parallel/context_parallel.h"
#include "tessel/parallel/groups.h"
#include "tessel/pipeline/executor.h"
#include "tessel/train/microbatches.h"
#include "tessel/train/plan.h"

namespace tessel {

class Evaluator {
 public:
  // Everything must outlive the evaluator.
  Evaluator(const Kernels& k, const TrainPlan& plan, ProcessGroups& groups, const GptDataSplits& data,
            PipelineExecutor& pipeline, const std::vector<std::unique_ptr<TransformerChunk>>& chunks);

  // The mean loss over --eval-iters global batches of `split` from sample `first_sample` on;
  // nullopt when the split has no data. Collective over the world.
  std::optional<double> loss(Split split, int64_t first_sample);

 private:
  struct SplitLoader {
    std::unique_ptr<BatchLoader> batches;
    std::unique_ptr<MicrobatchLoader> microbatches;
  };

  const Kernels& k_;
  const TrainPlan& plan_;
  ProcessGroups& groups_;
  const ContextParallel cp_;  // the loaders take this CP rank's rows
  const GptDataSplits& data_;
  PipelineExecutor& pipeline_;
  const std::vector<std::unique_ptr<TransformerChunk>>& chunks_;
  RankSchedule forwards_;  // this pipeline rank's forwards, lowered
  std::array<SplitLoader, kNumSplits> loaders_;
};

}  // namespace tessel
