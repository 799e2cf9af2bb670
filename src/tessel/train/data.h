// The datasets of a training run, built as Megatron-Core builds them (data/dataset_builder.h):
// from the data flags, the tokenizer and the number of samples each split must deliver (the
// training iterations' and the evaluations' global batches). The first rank builds and caches the
// index files while the others wait; a rank that still lacks them builds its own.
#pragma once

#include "tessel/data/dataset_builder.h"
#include "tessel/parallel/groups.h"
#include "tessel/train/plan.h"

namespace tessel {

// Collective over the world.
GptDataSplits build_training_data(const TrainPlan& plan, ProcessGroups& groups);

}  // namespace tessel
