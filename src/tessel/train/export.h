// --save-hf at the end of training: the whole model gathered from every rank's shards and written
// as one Hugging Face folder by world rank 0.
#pragma once

#include "tessel/core/params.h"
#include "tessel/parallel/groups.h"
#include "tessel/train/plan.h"

namespace tessel {

// Collective over the world. TP shards are gathered over TP and experts' ETP slices over ETP,
// the first expert-DP replica's EP ranks send their experts to EP rank 0, then the pipeline
// stages of the first DP replica send theirs to stage 0 (each stage's tensors in the order its
// own chunks declare them, all experts), which writes plan.options.checkpoint.save_hf.
void export_gathered(const ParamRegistry& params, const TrainPlan& plan, ProcessGroups& groups);

}  // namespace tessel
