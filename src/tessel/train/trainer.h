// The training loop. One iteration: zero the gradients, run the pipeline schedule over this
// rank's microbatches of the global batch (forward and backward, gradients reduced as they are
// finished), finish the gradient reductions, take the global norm, clip, step AdamW, gather the
// distributed optimizer's parameters, log, save.
#pragma once

#include <vector>

#include "tessel/train/log.h"
#include "tessel/train/plan.h"

namespace tessel {

class ProcessGroups;

// Trains on this rank's part of the layout and returns every iteration's statistics (the same
// on every rank). `groups` holds this rank's communicators for plan.layout()
// (ProcessGroups::single() alone for one process).
std::vector<IterationStats> train(const TrainPlan& plan, ProcessGroups& groups);

}  // namespace tessel
