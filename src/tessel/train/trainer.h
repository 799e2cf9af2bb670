// The training loop. One iteration: the global batch in, the pipeline schedule over this rank's
// microbatches of it (forward and backward, gradients reduced as they are finished), the
// optimizer step (train/step.h), the log line; evaluations and saves when due.
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
